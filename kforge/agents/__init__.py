"""The agents: generation (writes programs) and performance analysis (recommends one optimisation)."""

from .analysis import AnalysisAgent, CallUsage, ProfilingAdvisor, Recommendation, parse_recommendation
from .generation import Attempt, GenerationAgent, Reference
from .prompts import Prompts

__all__ = ["AnalysisAgent", "Attempt", "CallUsage", "GenerationAgent", "ProfilingAdvisor", "Prompts", "Recommendation",
           "Reference", "parse_recommendation"]
