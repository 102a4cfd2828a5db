"""lenbench: a benchmark and evaluation harness for LLM output-length predictors."""

from lenbench.distributions import QUANTILE_LEVELS, LengthDistribution
from lenbench.predictor import Needs, Predictor, TargetModel

__all__ = ["LengthDistribution", "Needs", "Predictor", "QUANTILE_LEVELS", "TargetModel"]
__version__ = "0.1.0"
