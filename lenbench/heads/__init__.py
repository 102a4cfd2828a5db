"""Small heads fitted on frozen features, shared by the feature predictors and OUTLETS: the MLP
trainer with early stopping (`training.py`) and monotone quantile heads with the pinball loss
(`quantile_loss.py`)."""
