"""Host policy of the engine: requests, scheduling, detokenization, and the `Backend` interface.

Imports no numba: the cuda backend is loaded lazily from `tensorfold.runtime` by `Engine.from_model`.
"""

from tensorfold.engine.backend import Backend, SampleRow
from tensorfold.engine.detokenizer import Detokenizer
from tensorfold.engine.engine import ContextLengthError, Engine, default_model_path
from tensorfold.engine.sequence import StepOutput, token_sha
from tensorfold.sampling import SamplingParams

__all__ = [
    "Engine",
    "ContextLengthError",
    "StepOutput",
    "SamplingParams",
    "Backend",
    "SampleRow",
    "Detokenizer",
    "token_sha",
    "default_model_path",
]
