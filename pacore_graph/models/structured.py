"""``with_structured_output`` for chat models that speak OpenAI's request fields (ours and PaCoReChatModel).

Three methods, as OpenAI-compatible servers offer them: ``function_calling`` (the schema as the one tool, forced
by name), ``json_schema`` (``response_format`` with the schema: vLLM's guided decoding) and ``json_mode``
(``response_format={"type": "json_object"}``; the prompt must ask for JSON). Pydantic classes come back as
instances, TypedDicts and JSON schemas as dicts; ``include_raw=True`` returns ``{"raw", "parsed",
"parsing_error"}`` and keeps a reply that does not parse.
"""

from __future__ import annotations

from operator import itemgetter
from typing import Any, Literal

from langchain_core.output_parsers import JsonOutputKeyToolsParser, JsonOutputParser, PydanticToolsParser
from langchain_core.output_parsers.pydantic import PydanticOutputParser
from langchain_core.runnables import Runnable, RunnableMap, RunnablePassthrough
from langchain_core.utils.function_calling import convert_to_json_schema, convert_to_openai_tool
from langchain_core.utils.pydantic import is_basemodel_subclass

Method = Literal["function_calling", "json_schema", "json_mode"]


class StructuredOutputMixin:
    """Gives a chat model with ``bind_tools`` (taking ``tool_choice`` and ``strict``) and ``bind`` (taking
    ``response_format``) LangChain's ``with_structured_output``."""

    def with_structured_output(
        self,
        schema: dict[str, Any] | type | None = None,
        *,
        method: Method = "function_calling",
        include_raw: bool = False,
        strict: bool | None = None,
        **kwargs: Any,
    ) -> Runnable:
        if kwargs:
            raise ValueError(f"with_structured_output got arguments it does not take: {sorted(kwargs)}")
        if schema is None and method != "json_mode":
            raise ValueError(f"method={method!r} needs a schema")
        pydantic = isinstance(schema, type) and is_basemodel_subclass(schema)
        traced = {"kwargs": {"method": method, "strict": strict}, "schema": schema}
        if method == "function_calling":
            name = convert_to_openai_tool(schema)["function"]["name"]
            model = self.bind_tools(  # type: ignore[attr-defined]
                [schema], tool_choice=name, strict=strict, ls_structured_output_format=traced
            )
            parser: Runnable = (
                PydanticToolsParser(tools=[schema], first_tool_only=True)  # type: ignore[list-item]
                if pydantic
                else JsonOutputKeyToolsParser(key_name=name, first_tool_only=True)
            )
        elif method in ("json_schema", "json_mode"):
            if method == "json_schema":
                response_format = json_response_format(schema, strict)  # type: ignore[arg-type]
            else:
                response_format = {"type": "json_object"}
                traced = {"kwargs": {"method": method}, "schema": schema} if schema is not None else None
            model = self.bind(response_format=response_format, ls_structured_output_format=traced)  # type: ignore[attr-defined]
            parser = PydanticOutputParser(pydantic_object=schema) if pydantic else JsonOutputParser()  # type: ignore[arg-type]
        else:
            raise ValueError(f"method must be 'function_calling', 'json_schema' or 'json_mode', not {method!r}")
        if not include_raw:
            return model | parser
        parsed = RunnablePassthrough.assign(parsed=itemgetter("raw") | parser, parsing_error=lambda _: None)
        unparsed = RunnablePassthrough.assign(parsed=lambda _: None)
        return RunnableMap(raw=model) | parsed.with_fallbacks([unparsed], exception_key="parsing_error")


def json_response_format(schema: dict[str, Any] | type, strict: bool | None) -> dict[str, Any]:
    """OpenAI's ``response_format`` for a JSON schema (vLLM: guided decoding to it)."""
    json_schema = convert_to_json_schema(schema)
    spec: dict[str, Any] = {"name": json_schema.get("title") or "output", "schema": json_schema}
    if strict is not None:
        spec["strict"] = strict
    return {"type": "json_schema", "json_schema": spec}
