"""Find the chat model inside LangChain's wrappers, and what the user set on it.

``model.bind_tools(...)``, ``.bind(...)``, ``.with_config(...)``, ``.with_retry()``, ``.with_fallbacks(...)``,
``.configurable_fields(...)`` and ``trim | model`` chains are still chat models: each trajectory calls the
wrapper as the user built it (bound tools and config kept; ``.with_retry()`` left out, as PaCoRe retries each
trajectory itself: :func:`without_retries`), and PaCoRe's sampling settings fill
in only what neither the model nor a binding set. A chain in which the model is followed by another
step (``with_structured_output`` adds a parser) does not return an AIMessage: it is refused here, at
construction, with what to do instead.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

from langchain_core.language_models import BaseChatModel
from langchain_core.runnables import Runnable, RunnableParallel, RunnableSequence
from langchain_core.runnables.base import RunnableBindingBase
from langchain_core.runnables.configurable import DynamicRunnable, RunnableConfigurableFields
from langchain_core.runnables.fallbacks import RunnableWithFallbacks
from langchain_core.runnables.passthrough import RunnableAssign
from langchain_core.runnables.retry import RunnableRetry

# Request fields PaCoReConfig may fill in, with the other names a model or binding may know them by.
PARAMETER_NAMES = {
    "temperature": ("temperature",),
    "top_p": ("top_p",),
    "max_tokens": ("max_tokens", "max_completion_tokens"),
}

STRUCTURED_OUTPUT_HINT = (
    "PaCoRe needs a chat model (or a chain that ends in one), whose AIMessage it can compact and pass on; "
    "{name} puts another step after the model (as with_structured_output(...) does), so its output is "
    "not a message. Pass the model itself - model.bind_tools([Schema], tool_choice=...) keeps the schema "
    "- and parse the answer message's tool call or content after PaCoRe"
)


@dataclass(frozen=True)
class WrappedChatModel:
    """A chat model found inside wrappers: what to call, and what the user already set."""

    model: BaseChatModel  # the innermost chat model
    call: Runnable[Any, Any]  # the wrappers around it, invoked with the messages (bound kwargs and config kept)
    prefix: Runnable[Any, Any] | None = None  # steps of a chain before the model, run first
    bound: dict[str, Any] = field(default_factory=dict)  # kwargs bound on the way in; outer bindings win
    configurable: dict[str, str] = field(default_factory=dict)  # configurable id -> model field name

    def sets(self, name: str, configured: frozenset[str] = frozenset()) -> bool:
        """Whether the user set request field ``name`` (on the model, a binding, or a configured field)."""
        names = PARAMETER_NAMES.get(name, (name,))
        model = self.model
        set_fields = model.model_fields_set
        extra = {**(getattr(model, "model_kwargs", None) or {}), **(getattr(model, "extra_body", None) or {})}
        return any(
            candidate in self.bound
            or candidate in extra
            or (candidate in set_fields and getattr(model, candidate, None) is not None)
            or any(self.configurable.get(key) == candidate for key in configured)
            for candidate in names
        )

    def sets_streaming(self) -> bool:
        return "stream" in self.bound or "streaming" in self.model.model_fields_set


def find_chat_model(runnable: Any) -> WrappedChatModel | None:
    """The chat model ``runnable`` is (possibly wrapped), None if it is something else (an agent).

    Raises TypeError for a chain that holds a chat model in a place PaCoRe cannot use.
    """
    found = _find(runnable)
    if found is None and _holds_chat_model(runnable):
        raise TypeError(STRUCTURED_OUTPUT_HINT.format(name=type(runnable).__name__))
    return found


def _find(runnable: Any) -> WrappedChatModel | None:
    if isinstance(runnable, BaseChatModel):
        return WrappedChatModel(model=runnable, call=runnable)
    if isinstance(runnable, RunnableBindingBase):
        inner = _find(runnable.bound)
        if inner is None:
            return None
        if inner.prefix is not None:
            raise TypeError(
                f"a binding around a chain ({type(runnable.bound).__name__}) passes its kwargs to the chain's "
                "first step, not to the model: bind the model before composing it"
            )
        return replace(inner, call=runnable, bound={**inner.bound, **runnable.kwargs})
    if isinstance(runnable, DynamicRunnable):
        inner = _find(runnable.default)
        if inner is None:
            return None
        configurable = dict(inner.configurable)
        if isinstance(runnable, RunnableConfigurableFields):
            configurable.update({spec.id: name for name, spec in runnable.fields.items() if hasattr(spec, "id")})
        return replace(inner, call=runnable, configurable=configurable)
    if isinstance(runnable, RunnableWithFallbacks):
        inner = _find(runnable.runnable)
        return None if inner is None else replace(inner, call=runnable)
    if isinstance(runnable, RunnableSequence):
        last = _find(runnable.last)
        if last is not None:
            steps = runnable.steps[:-1]
            prefix = steps[0] if len(steps) == 1 else RunnableSequence(*steps)
            return replace(last, prefix=prefix)
        if _holds_chat_model(runnable):
            raise TypeError(STRUCTURED_OUTPUT_HINT.format(name=type(runnable).__name__))
    return None


def _holds_chat_model(runnable: Any) -> bool:
    """Whether a chat model sits anywhere inside LangChain's composition types (not inside agents)."""
    if isinstance(runnable, BaseChatModel):
        return True
    if isinstance(runnable, RunnableSequence):
        return any(_holds_chat_model(step) for step in runnable.steps)
    if isinstance(runnable, RunnableParallel):
        return any(_holds_chat_model(step) for step in runnable.steps__.values())
    if isinstance(runnable, RunnableAssign):
        return _holds_chat_model(runnable.mapper)
    if isinstance(runnable, RunnableBindingBase):
        return _holds_chat_model(runnable.bound)
    if isinstance(runnable, DynamicRunnable):
        return _holds_chat_model(runnable.default)
    return False


def without_retries(runnable: Runnable[Any, Any]) -> Runnable[Any, Any]:
    """The same wrappers without ``.with_retry()`` ones: PaCoRe retries each trajectory itself
    (``PaCoReConfig.retry``), and a second layer would multiply its attempts (and the count its errors give)."""
    if isinstance(runnable, RunnableRetry):
        return without_retries(runnable.bound)
    if isinstance(runnable, RunnableBindingBase):
        inner = without_retries(runnable.bound)
        return runnable if inner is runnable.bound else runnable.model_copy(update={"bound": inner})
    if isinstance(runnable, DynamicRunnable):
        inner = without_retries(runnable.default)
        return runnable if inner is runnable.default else runnable.model_copy(update={"default": inner})
    if isinstance(runnable, RunnableWithFallbacks):
        inner = without_retries(runnable.runnable)
        fallbacks = [without_retries(fallback) for fallback in runnable.fallbacks]
        if inner is runnable.runnable and all(a is b for a, b in zip(fallbacks, runnable.fallbacks, strict=True)):
            return runnable
        return runnable.model_copy(update={"runnable": inner, "fallbacks": fallbacks})
    return runnable


def with_model(runnable: Runnable[Any, Any], model: BaseChatModel) -> Runnable[Any, Any]:
    """The same wrappers around another chat model (e.g. ChatOpenAI upgraded to keep reasoning)."""
    if isinstance(runnable, BaseChatModel):
        return model
    if isinstance(runnable, RunnableBindingBase):
        return runnable.model_copy(update={"bound": with_model(runnable.bound, model)})
    if isinstance(runnable, DynamicRunnable):
        return runnable.model_copy(update={"default": with_model(runnable.default, model)})
    if isinstance(runnable, RunnableWithFallbacks):
        return runnable.model_copy(update={"runnable": with_model(runnable.runnable, model)})
    raise TypeError(f"cannot replace the model inside {type(runnable).__name__}")
