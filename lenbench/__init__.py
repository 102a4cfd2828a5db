"""lenbench: a benchmark and evaluation harness for LLM output-length predictors."""

from lenbench.predictor import Needs, Predictor, TargetModel

__all__ = ["Needs", "Predictor", "TargetModel"]
__version__ = "0.1.0"
