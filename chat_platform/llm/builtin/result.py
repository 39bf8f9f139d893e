"""What a built-in model produces, independent of litellm's response types."""

from dataclasses import dataclass, field

from chat_platform.llm.tokens import count_message_tokens


@dataclass(frozen=True)
class BuiltinResult:
    text: str
    finish_reason: str
    prompt_tokens: int
    completion_tokens: int
    tool_calls: list[dict] = field(default_factory=list)

    def usage(self) -> dict[str, int]:
        """OpenAI's ``usage`` object for this answer."""
        return {
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": self.completion_tokens,
            "total_tokens": self.prompt_tokens + self.completion_tokens,
        }


def content_text(message: dict) -> str:
    """A message's text: string content, or the text parts of list content."""
    content = message.get("content")
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(
            str(part.get("text") or "")
            for part in content
            if isinstance(part, dict) and part.get("type", "text") == "text"
        )
    return ""


def prompt_tokens(messages: list[dict], *, model: str) -> int:
    """Prompt usage as the platform counts it: every message's text plus its overhead, and the
    arguments of any tool calls it carries."""
    total = 0
    for message in messages:
        text = content_text(message)
        for call in message.get("tool_calls") or []:
            function = call.get("function") or {}
            text += str(function.get("name") or "") + str(function.get("arguments") or "")
        total += count_message_tokens(text, model=model)
    return total
