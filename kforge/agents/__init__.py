"""The agents: generation (writes programs) and performance analysis (recommends one optimisation)."""

from .generation import Attempt, GenerationAgent, Reference
from .prompts import Prompts

__all__ = ["Attempt", "GenerationAgent", "Reference", "Prompts"]
