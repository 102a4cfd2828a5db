"""lenbench: a benchmark and evaluation harness for LLM output-length predictors."""

from lenbench.configs import register as _register_config_schemas
from lenbench.contract.distributions import QUANTILE_LEVELS, LengthDistribution
from lenbench.contract.needs import Needs, TargetModel
from lenbench.contract.predictor import Predictor

__all__ = ["LengthDistribution", "Needs", "Predictor", "QUANTILE_LEVELS", "TargetModel"]
__version__ = "0.1.0"

_register_config_schemas()
