"""Type stubs of panto's native module (written by hand; the module is Rust)."""

from typing import Any, Callable, ClassVar, Dict, List, Literal, Optional, Tuple, Union, final

__version__: str

def error_kinds() -> List[Tuple[int, str]]: ...
def event_types() -> List[str]: ...
def active_streams() -> int: ...
def _shutdown() -> None: ...

@final
class Usage:
    input_tokens: int
    output_tokens: int
    cache_read_tokens: int
    cache_write_tokens: int
    reasoning_tokens: int
    def to_dict(self) -> Dict[str, int]: ...

class _Event:
    type: ClassVar[str]
    def to_json(self) -> str: ...
    def to_dict(self) -> Dict[str, Any]: ...

@final
class MessageStart(_Event):
    type: ClassVar[Literal["message_start"]]
    message: int
    model: str
    response_id: Optional[str]

@final
class BlockStart(_Event):
    type: ClassVar[Literal["block_start"]]
    message: int
    block: int
    kind: Literal["text", "reasoning", "tool_call"]

@final
class ContentDelta(_Event):
    type: ClassVar[Literal["content_delta"]]
    message: int
    block: int
    kind: Literal["text", "reasoning", "tool_args"]
    text: str

@final
class ToolDetails(_Event):
    type: ClassVar[Literal["tool_details"]]
    message: int
    block: int
    call_id: str
    name: str

@final
class BlockComplete(_Event):
    type: ClassVar[Literal["block_complete"]]
    message: int
    block: int
    content: Dict[str, Any]

@final
class MessageEnd(_Event):
    type: ClassVar[Literal["message_end"]]
    message: int
    stop_reason: str
    usage: Usage

@final
class ToolCallStart(_Event):
    type: ClassVar[Literal["tool_call_start"]]
    message: int
    call_id: str
    name: str
    arguments: Optional[Dict[str, Any]]
    arguments_raw: Optional[str]
    host: bool

@final
class ToolResult(_Event):
    type: ClassVar[Literal["tool_result"]]
    message: int
    call_id: str
    name: str
    output: str
    is_error: bool

@final
class ProviderRetry(_Event):
    type: ClassVar[Literal["provider_retry"]]
    message: int
    attempt: int
    max_attempts: int
    delay_ms: int
    reason: str
    status: Optional[int]

@final
class MessageComplete(_Event):
    type: ClassVar[Literal["message_complete"]]
    stop_reason: str
    usage: Usage
    messages: int
    text: str

@final
class HistoryCompacted(_Event):
    type: ClassVar[Literal["history_compacted"]]
    messages_before: int
    messages_after: int
    tokens_before: int
    tokens_after: int

@final
class UnknownEvent:
    @property
    def type(self) -> str: ...
    def to_json(self) -> str: ...
    def to_dict(self) -> Dict[str, Any]: ...

_AnyEvent = Union[
    MessageStart,
    BlockStart,
    ContentDelta,
    ToolDetails,
    BlockComplete,
    MessageEnd,
    ToolCallStart,
    ToolResult,
    ProviderRetry,
    MessageComplete,
    HistoryCompacted,
    UnknownEvent,
]

@final
class StreamControl:
    @property
    def cancelled(self) -> bool: ...
    def cancel(self) -> None: ...
    def submit_tool_result(self, call_id: str, output: str, is_error: bool = False) -> None: ...

@final
class Stream:
    """One turn as an iterator of events and a context manager that closes it."""

    def __iter__(self) -> "Stream": ...
    def __next__(self) -> _AnyEvent: ...
    def __enter__(self) -> "Stream": ...
    def __exit__(self, *exc: object) -> Literal[False]: ...
    @property
    def cancelled(self) -> bool: ...
    def cancel(self) -> None: ...
    def close(self) -> None: ...
    def submit_tool_result(self, call_id: str, output: str, is_error: bool = False) -> None: ...
    def final(self) -> MessageComplete: ...
    def text(self) -> str: ...
    @property
    def waits(self) -> int: ...
    def consumer_waiting(self) -> bool: ...
    def control(self) -> StreamControl: ...
    def _try_next(self) -> Optional[_AnyEvent]: ...
    def _wait(self, timeout: Optional[float] = None) -> bool: ...

@final
class CancelToken:
    def __new__(cls) -> "CancelToken": ...
    def cancel(self) -> None: ...
    @property
    def cancelled(self) -> bool: ...

class Agent:
    def __new__(cls, config_json: str) -> "Agent": ...
    def stream(
        self,
        input: str,
        model: Optional[str] = None,
        on_host_call: Optional[Callable[[ToolCallStart], None]] = None,
        reasoning_json: Optional[str] = None,
    ) -> Stream: ...
    def compact(self, options_json: str, cancel: Optional[CancelToken] = None) -> str: ...
    def transcript_json(self) -> str: ...
    def history_json(self) -> str: ...
    def load_history_json(self, json: str) -> None: ...
    def clear_history(self) -> None: ...
    @property
    def provider(self) -> str: ...
    @property
    def model(self) -> str: ...
    @property
    def base_url(self) -> str: ...
