"""``with_structured_output`` for chat models that speak OpenAI's request fields (ours and PaCoReChatModel).

Three methods, as OpenAI-compatible servers offer them: ``function_calling`` (the schema as the one tool, forced
by name), ``json_schema`` (``response_format`` with the schema: vLLM's guided decoding) and ``json_mode``
(``response_format={"type": "json_object"}``; the prompt must ask for JSON). Pydantic classes come back as
instances, TypedDicts and JSON schemas as dicts; ``include_raw=True`` returns ``{"raw", "parsed",
"parsing_error"}`` and keeps a reply that does not parse.
"""

from __future__ import annotations

from operator import itemgetter
from typing import Any, Literal, TypeGuard

from langchain_core.language_models import BaseChatModel, LanguageModelInput
from langchain_core.output_parsers import JsonOutputKeyToolsParser, JsonOutputParser, PydanticToolsParser
from langchain_core.output_parsers.pydantic import PydanticOutputParser
from langchain_core.runnables import Runnable, RunnableMap, RunnablePassthrough
from langchain_core.utils.function_calling import convert_to_json_schema, convert_to_openai_tool
from langchain_core.utils.pydantic import is_basemodel_subclass
from pydantic import BaseModel
from pydantic.v1 import BaseModel as BaseModelV1

Method = Literal["function_calling", "json_schema", "json_mode"]


class StructuredOutputMixin(BaseChatModel):
    """Gives a chat model whose ``bind_tools`` takes ``tool_choice`` and ``strict`` and whose requests take
    ``response_format`` LangChain's ``with_structured_output`` (a base class of the model, before ``BaseChatModel``)."""

    def with_structured_output(
        self,
        schema: dict[str, Any] | type | None = None,
        *,
        method: Method = "function_calling",
        include_raw: bool = False,
        strict: bool | None = None,
        **kwargs: Any,
    ) -> Runnable[LanguageModelInput, Any]:
        if kwargs:
            raise ValueError(f"with_structured_output got arguments it does not take: {sorted(kwargs)}")
        model: Runnable[LanguageModelInput, Any]
        parser: Runnable[Any, Any]
        traced: dict[str, Any] | None
        if method == "json_mode":
            traced = {"kwargs": {"method": method}, "schema": schema} if schema is not None else None
            model = self.bind(response_format={"type": "json_object"}, ls_structured_output_format=traced)
            parser = PydanticOutputParser(pydantic_object=schema) if _is_model_class(schema) else JsonOutputParser()
        elif schema is None:
            raise ValueError(f"method={method!r} needs a schema")
        elif method == "function_calling":
            traced = {"kwargs": {"method": method, "strict": strict}, "schema": schema}
            name = convert_to_openai_tool(schema)["function"]["name"]
            model = self.bind_tools([schema], tool_choice=name, strict=strict, ls_structured_output_format=traced)
            parser = (
                PydanticToolsParser(tools=[schema], first_tool_only=True)
                if _is_model_class(schema)
                else JsonOutputKeyToolsParser(key_name=name, first_tool_only=True)
            )
        elif method == "json_schema":
            traced = {"kwargs": {"method": method, "strict": strict}, "schema": schema}
            model = self.bind(response_format=json_response_format(schema, strict), ls_structured_output_format=traced)
            parser = PydanticOutputParser(pydantic_object=schema) if _is_model_class(schema) else JsonOutputParser()
        else:
            raise ValueError(f"method must be 'function_calling', 'json_schema' or 'json_mode', not {method!r}")
        if not include_raw:
            return model | parser
        parsed = RunnablePassthrough.assign(parsed=itemgetter("raw") | parser, parsing_error=lambda _: None)
        unparsed = RunnablePassthrough.assign(parsed=lambda _: None)
        return RunnableMap(raw=model) | parsed.with_fallbacks([unparsed], exception_key="parsing_error")


def _is_model_class(schema: object) -> TypeGuard[type[BaseModel] | type[BaseModelV1]]:
    """A pydantic class (v2, or v1 as LangChain still accepts): parsed into an instance, not a dict."""
    return isinstance(schema, type) and is_basemodel_subclass(schema)


def json_response_format(schema: dict[str, Any] | type, strict: bool | None) -> dict[str, Any]:
    """OpenAI's ``response_format`` for a JSON schema (vLLM: guided decoding to it)."""
    json_schema = convert_to_json_schema(schema)
    spec: dict[str, Any] = {"name": json_schema.get("title") or "output", "schema": json_schema}
    if strict is not None:
        spec["strict"] = strict
    return {"type": "json_schema", "json_schema": spec}
