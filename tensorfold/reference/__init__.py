"""The numpy oracle of tensorfold: model operations (``ops``), the decoding state (``state``) and the
reference forward in every mode (``model``). Nothing under this package imports numba."""

from tensorfold.reference.model import ReferenceModel
from tensorfold.reference.state import State, TreeResult

__all__ = ["ReferenceModel", "State", "TreeResult"]
