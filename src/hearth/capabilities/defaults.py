"""Built-in prompt versions (version 0) a capability uses when its default prompt code has no active
version in the catalog — so summarize, extraction and chat answer on a fresh install, before any
prompt was imported. An imported or created version of the same code always wins.
"""

from __future__ import annotations

from hearth.prompts.spec import PromptVersion, Variable

_EN_SUMMARY = ("Summarize the following text in {{ max_sentences }} sentences or fewer, in the text's own "
               "language. Keep facts, numbers and names exact; add nothing.\n\n{{ text }}")
_ZH_SUMMARY = ("请用不超过 {{ max_sentences }} 句话概括下面的文本，保持事实、数字和名称准确，"
               "不要添加内容。\n\n{{ text }}")
_EN_EXTRACT = ("Extract the information from the text below as one JSON document that matches this JSON "
               "Schema:\n{{ schema }}\nAnswer with the JSON only.\n\nText:\n{{ text }}")
_ZH_EXTRACT = ("从下面的文本中提取信息，输出一个符合以下 JSON Schema 的 JSON 文档：\n{{ schema }}\n"
               "只输出 JSON。\n\n文本：\n{{ text }}")
_EN_BILL = ("Extract the bill (invoice or receipt) below as one JSON document that matches this JSON Schema:\n"
            "{{ schema }}\nAmounts are numbers, dates are YYYY-MM-DD, currency is an ISO 4217 code; use null "
            "for what the bill does not say. Answer with the JSON only.\n\nBill:\n{{ text }}")
_ZH_BILL = ("从下面的票据（发票或收据）中提取信息，输出一个符合以下 JSON Schema 的 JSON 文档：\n{{ schema }}\n"
            "金额为数字，日期为 YYYY-MM-DD，币种为 ISO 4217 代码；票据上没有的信息填 null。"
            "只输出 JSON。\n\n票据：\n{{ text }}")


def _builtin(code: str, contents: dict[str, dict[str, str | None]],
             variables: tuple[Variable, ...] = ()) -> PromptVersion:
    return PromptVersion(code=code, version=0, status="active", default_locale="en", contents=contents,
                         variables=variables, model=None, scene=None, output_schema=None, params={},
                         quality_gate=None, canary_share=0.0, content_hash="builtin")


BUILTIN: dict[str, PromptVersion] = {
    "summary": _builtin("summary", {"en": {"system": None, "user": _EN_SUMMARY},
                                    "zh": {"system": None, "user": _ZH_SUMMARY}},
                        (Variable("max_sentences", False, None, 3, "at most this many sentences"),)),
    "extraction": _builtin("extraction", {"en": {"system": None, "user": _EN_EXTRACT},
                                          "zh": {"system": None, "user": _ZH_EXTRACT}}),
    "bill_extraction": _builtin("bill_extraction", {"en": {"system": None, "user": _EN_BILL},
                                                    "zh": {"system": None, "user": _ZH_BILL}}),
    "chat_assistant": _builtin("chat_assistant", {"en": {"system": "You are a helpful assistant.", "user": None},
                                                  "zh": {"system": "你是一个乐于助人的助手。", "user": None}}),
}
