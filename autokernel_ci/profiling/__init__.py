"""Model loading, the profiler, classification into the nine kernel types, and the plan."""

from autokernel_ci.profiling.classify import Call, classify
from autokernel_ci.profiling.commands import profile_main, profile_model
from autokernel_ci.profiling.loading import ForwardError, LoadError, build_inputs, build_model, load_callable
from autokernel_ci.profiling.planner import build_plan, render_plan
from autokernel_ci.profiling.profiler import Profile, profile_forward

__all__ = ["Call", "ForwardError", "LoadError", "Profile", "build_inputs", "build_model", "build_plan", "classify",
           "load_callable", "profile_forward", "profile_main", "profile_model", "render_plan"]
