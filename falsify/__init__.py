"""falsify: contracts as validated data, bound to pytest falsifiers, gated in CI, attacked with planted bugs."""

from falsify.checks import check
from falsify.errors import BindingError, ContractError, ContractViolation, FalsifyError, FormulaError

__all__ = ["BindingError", "ContractError", "ContractViolation", "FalsifyError", "FormulaError", "check"]
__version__ = "0.1.0"
