"""Agents that propose kernel candidates: the interface, the built-in search agent, the LLM agent."""

from autokernel_ci.agents.base import Agent, AgentState, Proposal
from autokernel_ci.agents.search import SearchAgent

__all__ = ["Agent", "AgentState", "Proposal", "SearchAgent"]
