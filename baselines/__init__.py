"""Reference predictors, one module each. Any of them is also a worked example of the contract."""
