"""lenbench: a benchmark and evaluation harness for LLM output-length predictors."""

from lenbench.configs import register as _register_config_schemas
from lenbench.distributions import QUANTILE_LEVELS, LengthDistribution
from lenbench.predictor import Needs, Predictor, TargetModel

__all__ = ["LengthDistribution", "Needs", "Predictor", "QUANTILE_LEVELS", "TargetModel"]
__version__ = "0.1.0"

_register_config_schemas()
