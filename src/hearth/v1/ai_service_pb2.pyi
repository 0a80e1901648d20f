from google.protobuf import struct_pb2 as _struct_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class ChatMessage(_message.Message):
    __slots__ = ("role", "content", "name")
    ROLE_FIELD_NUMBER: _ClassVar[int]
    CONTENT_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    role: str
    content: str
    name: str
    def __init__(self, role: _Optional[str] = ..., content: _Optional[str] = ..., name: _Optional[str] = ...) -> None: ...

class ChatRequest(_message.Message):
    __slots__ = ("model", "messages", "temperature", "top_p", "max_tokens", "stop", "user", "tenant", "scene", "presence_penalty", "frequency_penalty", "seed")
    MODEL_FIELD_NUMBER: _ClassVar[int]
    MESSAGES_FIELD_NUMBER: _ClassVar[int]
    TEMPERATURE_FIELD_NUMBER: _ClassVar[int]
    TOP_P_FIELD_NUMBER: _ClassVar[int]
    MAX_TOKENS_FIELD_NUMBER: _ClassVar[int]
    STOP_FIELD_NUMBER: _ClassVar[int]
    USER_FIELD_NUMBER: _ClassVar[int]
    TENANT_FIELD_NUMBER: _ClassVar[int]
    SCENE_FIELD_NUMBER: _ClassVar[int]
    PRESENCE_PENALTY_FIELD_NUMBER: _ClassVar[int]
    FREQUENCY_PENALTY_FIELD_NUMBER: _ClassVar[int]
    SEED_FIELD_NUMBER: _ClassVar[int]
    model: str
    messages: _containers.RepeatedCompositeFieldContainer[ChatMessage]
    temperature: float
    top_p: float
    max_tokens: int
    stop: _containers.RepeatedScalarFieldContainer[str]
    user: str
    tenant: str
    scene: str
    presence_penalty: float
    frequency_penalty: float
    seed: int
    def __init__(self, model: _Optional[str] = ..., messages: _Optional[_Iterable[_Union[ChatMessage, _Mapping]]] = ..., temperature: _Optional[float] = ..., top_p: _Optional[float] = ..., max_tokens: _Optional[int] = ..., stop: _Optional[_Iterable[str]] = ..., user: _Optional[str] = ..., tenant: _Optional[str] = ..., scene: _Optional[str] = ..., presence_penalty: _Optional[float] = ..., frequency_penalty: _Optional[float] = ..., seed: _Optional[int] = ...) -> None: ...

class Usage(_message.Message):
    __slots__ = ("prompt_tokens", "completion_tokens", "total_tokens", "estimated")
    PROMPT_TOKENS_FIELD_NUMBER: _ClassVar[int]
    COMPLETION_TOKENS_FIELD_NUMBER: _ClassVar[int]
    TOTAL_TOKENS_FIELD_NUMBER: _ClassVar[int]
    ESTIMATED_FIELD_NUMBER: _ClassVar[int]
    prompt_tokens: int
    completion_tokens: int
    total_tokens: int
    estimated: bool
    def __init__(self, prompt_tokens: _Optional[int] = ..., completion_tokens: _Optional[int] = ..., total_tokens: _Optional[int] = ..., estimated: _Optional[bool] = ...) -> None: ...

class ChatResponse(_message.Message):
    __slots__ = ("id", "model", "content", "finish_reason", "usage", "request_id")
    ID_FIELD_NUMBER: _ClassVar[int]
    MODEL_FIELD_NUMBER: _ClassVar[int]
    CONTENT_FIELD_NUMBER: _ClassVar[int]
    FINISH_REASON_FIELD_NUMBER: _ClassVar[int]
    USAGE_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    id: str
    model: str
    content: str
    finish_reason: str
    usage: Usage
    request_id: str
    def __init__(self, id: _Optional[str] = ..., model: _Optional[str] = ..., content: _Optional[str] = ..., finish_reason: _Optional[str] = ..., usage: _Optional[_Union[Usage, _Mapping]] = ..., request_id: _Optional[str] = ...) -> None: ...

class StreamEnd(_message.Message):
    __slots__ = ("finish_reason", "usage", "model", "id", "request_id")
    FINISH_REASON_FIELD_NUMBER: _ClassVar[int]
    USAGE_FIELD_NUMBER: _ClassVar[int]
    MODEL_FIELD_NUMBER: _ClassVar[int]
    ID_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    finish_reason: str
    usage: Usage
    model: str
    id: str
    request_id: str
    def __init__(self, finish_reason: _Optional[str] = ..., usage: _Optional[_Union[Usage, _Mapping]] = ..., model: _Optional[str] = ..., id: _Optional[str] = ..., request_id: _Optional[str] = ...) -> None: ...

class ChatChunk(_message.Message):
    __slots__ = ("delta", "done")
    DELTA_FIELD_NUMBER: _ClassVar[int]
    DONE_FIELD_NUMBER: _ClassVar[int]
    delta: str
    done: StreamEnd
    def __init__(self, delta: _Optional[str] = ..., done: _Optional[_Union[StreamEnd, _Mapping]] = ...) -> None: ...

class SummarizeRequest(_message.Message):
    __slots__ = ("text", "ocr_text", "file_id", "file_url", "max_sentences", "locale", "scene", "model", "max_tokens", "user", "tenant", "prompt_code", "variables")
    TEXT_FIELD_NUMBER: _ClassVar[int]
    OCR_TEXT_FIELD_NUMBER: _ClassVar[int]
    FILE_ID_FIELD_NUMBER: _ClassVar[int]
    FILE_URL_FIELD_NUMBER: _ClassVar[int]
    MAX_SENTENCES_FIELD_NUMBER: _ClassVar[int]
    LOCALE_FIELD_NUMBER: _ClassVar[int]
    SCENE_FIELD_NUMBER: _ClassVar[int]
    MODEL_FIELD_NUMBER: _ClassVar[int]
    MAX_TOKENS_FIELD_NUMBER: _ClassVar[int]
    USER_FIELD_NUMBER: _ClassVar[int]
    TENANT_FIELD_NUMBER: _ClassVar[int]
    PROMPT_CODE_FIELD_NUMBER: _ClassVar[int]
    VARIABLES_FIELD_NUMBER: _ClassVar[int]
    text: str
    ocr_text: str
    file_id: str
    file_url: str
    max_sentences: int
    locale: str
    scene: str
    model: str
    max_tokens: int
    user: str
    tenant: str
    prompt_code: str
    variables: _struct_pb2.Struct
    def __init__(self, text: _Optional[str] = ..., ocr_text: _Optional[str] = ..., file_id: _Optional[str] = ..., file_url: _Optional[str] = ..., max_sentences: _Optional[int] = ..., locale: _Optional[str] = ..., scene: _Optional[str] = ..., model: _Optional[str] = ..., max_tokens: _Optional[int] = ..., user: _Optional[str] = ..., tenant: _Optional[str] = ..., prompt_code: _Optional[str] = ..., variables: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ...) -> None: ...

class ExtractRequest(_message.Message):
    __slots__ = ("text", "ocr_text", "file_id", "file_url", "schema", "schema_code", "locale", "scene", "model", "max_tokens", "user", "tenant", "prompt_code", "variables")
    TEXT_FIELD_NUMBER: _ClassVar[int]
    OCR_TEXT_FIELD_NUMBER: _ClassVar[int]
    FILE_ID_FIELD_NUMBER: _ClassVar[int]
    FILE_URL_FIELD_NUMBER: _ClassVar[int]
    SCHEMA_FIELD_NUMBER: _ClassVar[int]
    SCHEMA_CODE_FIELD_NUMBER: _ClassVar[int]
    LOCALE_FIELD_NUMBER: _ClassVar[int]
    SCENE_FIELD_NUMBER: _ClassVar[int]
    MODEL_FIELD_NUMBER: _ClassVar[int]
    MAX_TOKENS_FIELD_NUMBER: _ClassVar[int]
    USER_FIELD_NUMBER: _ClassVar[int]
    TENANT_FIELD_NUMBER: _ClassVar[int]
    PROMPT_CODE_FIELD_NUMBER: _ClassVar[int]
    VARIABLES_FIELD_NUMBER: _ClassVar[int]
    text: str
    ocr_text: str
    file_id: str
    file_url: str
    schema: _struct_pb2.Struct
    schema_code: str
    locale: str
    scene: str
    model: str
    max_tokens: int
    user: str
    tenant: str
    prompt_code: str
    variables: _struct_pb2.Struct
    def __init__(self, text: _Optional[str] = ..., ocr_text: _Optional[str] = ..., file_id: _Optional[str] = ..., file_url: _Optional[str] = ..., schema: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ..., schema_code: _Optional[str] = ..., locale: _Optional[str] = ..., scene: _Optional[str] = ..., model: _Optional[str] = ..., max_tokens: _Optional[int] = ..., user: _Optional[str] = ..., tenant: _Optional[str] = ..., prompt_code: _Optional[str] = ..., variables: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ...) -> None: ...

class ExtractBillRequest(_message.Message):
    __slots__ = ("text", "ocr_text", "file_id", "file_url", "locale", "scene", "model", "max_tokens", "user", "tenant", "prompt_code", "variables")
    TEXT_FIELD_NUMBER: _ClassVar[int]
    OCR_TEXT_FIELD_NUMBER: _ClassVar[int]
    FILE_ID_FIELD_NUMBER: _ClassVar[int]
    FILE_URL_FIELD_NUMBER: _ClassVar[int]
    LOCALE_FIELD_NUMBER: _ClassVar[int]
    SCENE_FIELD_NUMBER: _ClassVar[int]
    MODEL_FIELD_NUMBER: _ClassVar[int]
    MAX_TOKENS_FIELD_NUMBER: _ClassVar[int]
    USER_FIELD_NUMBER: _ClassVar[int]
    TENANT_FIELD_NUMBER: _ClassVar[int]
    PROMPT_CODE_FIELD_NUMBER: _ClassVar[int]
    VARIABLES_FIELD_NUMBER: _ClassVar[int]
    text: str
    ocr_text: str
    file_id: str
    file_url: str
    locale: str
    scene: str
    model: str
    max_tokens: int
    user: str
    tenant: str
    prompt_code: str
    variables: _struct_pb2.Struct
    def __init__(self, text: _Optional[str] = ..., ocr_text: _Optional[str] = ..., file_id: _Optional[str] = ..., file_url: _Optional[str] = ..., locale: _Optional[str] = ..., scene: _Optional[str] = ..., model: _Optional[str] = ..., max_tokens: _Optional[int] = ..., user: _Optional[str] = ..., tenant: _Optional[str] = ..., prompt_code: _Optional[str] = ..., variables: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ...) -> None: ...

class GenerateRequest(_message.Message):
    __slots__ = ("role", "locale", "scene", "model", "max_tokens", "user", "tenant", "prompt_code", "variables")
    ROLE_FIELD_NUMBER: _ClassVar[int]
    LOCALE_FIELD_NUMBER: _ClassVar[int]
    SCENE_FIELD_NUMBER: _ClassVar[int]
    MODEL_FIELD_NUMBER: _ClassVar[int]
    MAX_TOKENS_FIELD_NUMBER: _ClassVar[int]
    USER_FIELD_NUMBER: _ClassVar[int]
    TENANT_FIELD_NUMBER: _ClassVar[int]
    PROMPT_CODE_FIELD_NUMBER: _ClassVar[int]
    VARIABLES_FIELD_NUMBER: _ClassVar[int]
    role: str
    locale: str
    scene: str
    model: str
    max_tokens: int
    user: str
    tenant: str
    prompt_code: str
    variables: _struct_pb2.Struct
    def __init__(self, role: _Optional[str] = ..., locale: _Optional[str] = ..., scene: _Optional[str] = ..., model: _Optional[str] = ..., max_tokens: _Optional[int] = ..., user: _Optional[str] = ..., tenant: _Optional[str] = ..., prompt_code: _Optional[str] = ..., variables: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ...) -> None: ...

class RoleChatMessage(_message.Message):
    __slots__ = ("role", "content")
    ROLE_FIELD_NUMBER: _ClassVar[int]
    CONTENT_FIELD_NUMBER: _ClassVar[int]
    role: str
    content: str
    def __init__(self, role: _Optional[str] = ..., content: _Optional[str] = ...) -> None: ...

class RoleChatRequest(_message.Message):
    __slots__ = ("role", "messages", "request_id", "locale", "scene", "model", "max_tokens", "user", "tenant", "prompt_code", "variables")
    ROLE_FIELD_NUMBER: _ClassVar[int]
    MESSAGES_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    LOCALE_FIELD_NUMBER: _ClassVar[int]
    SCENE_FIELD_NUMBER: _ClassVar[int]
    MODEL_FIELD_NUMBER: _ClassVar[int]
    MAX_TOKENS_FIELD_NUMBER: _ClassVar[int]
    USER_FIELD_NUMBER: _ClassVar[int]
    TENANT_FIELD_NUMBER: _ClassVar[int]
    PROMPT_CODE_FIELD_NUMBER: _ClassVar[int]
    VARIABLES_FIELD_NUMBER: _ClassVar[int]
    role: str
    messages: _containers.RepeatedCompositeFieldContainer[RoleChatMessage]
    request_id: str
    locale: str
    scene: str
    model: str
    max_tokens: int
    user: str
    tenant: str
    prompt_code: str
    variables: _struct_pb2.Struct
    def __init__(self, role: _Optional[str] = ..., messages: _Optional[_Iterable[_Union[RoleChatMessage, _Mapping]]] = ..., request_id: _Optional[str] = ..., locale: _Optional[str] = ..., scene: _Optional[str] = ..., model: _Optional[str] = ..., max_tokens: _Optional[int] = ..., user: _Optional[str] = ..., tenant: _Optional[str] = ..., prompt_code: _Optional[str] = ..., variables: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ...) -> None: ...

class CapabilityResponse(_message.Message):
    __slots__ = ("data", "text", "model", "usage", "degraded", "request_id")
    DATA_FIELD_NUMBER: _ClassVar[int]
    TEXT_FIELD_NUMBER: _ClassVar[int]
    MODEL_FIELD_NUMBER: _ClassVar[int]
    USAGE_FIELD_NUMBER: _ClassVar[int]
    DEGRADED_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    data: _struct_pb2.Struct
    text: str
    model: str
    usage: Usage
    degraded: bool
    request_id: str
    def __init__(self, data: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ..., text: _Optional[str] = ..., model: _Optional[str] = ..., usage: _Optional[_Union[Usage, _Mapping]] = ..., degraded: _Optional[bool] = ..., request_id: _Optional[str] = ...) -> None: ...
