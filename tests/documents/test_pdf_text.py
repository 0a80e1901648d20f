"""The PDF text layer, page by page: text back in English and Chinese, image-only pages flagged for OCR,
an optional OCR engine, and the three refusals (corrupt, encrypted, too many pages)."""

from __future__ import annotations

import json
import threading

import pytest

from hearth.documents import pdf_text
from hearth.documents.pdf_text import PageImage, parse_pdf
from hearth.errors import CATALOG, HearthError
from hearth.tasks.retry import classify
from tests.documents import pdf_factory


def test_every_page_comes_back_in_order_with_its_text_and_1_based_number() -> None:
    parsed = parse_pdf(pdf_factory.english_report(3), max_pages=10)
    assert parsed.page_count == 3
    assert [p.number for p in parsed.pages] == [1, 2, 3]
    for page in parsed.pages:
        assert page.text.startswith(f"Page {page.number} of the annual report\n")
        assert "accelerated computing platforms" in page.text
        assert not page.needs_ocr and not page.from_ocr
        assert page.chars == len("".join(page.text.split()))
    assert "\r" not in parsed.pages[0].text


def test_chinese_text_with_a_cid_font_comes_back_exactly() -> None:
    parsed = parse_pdf(pdf_factory.chinese_report(), max_pages=10)
    assert parsed.pages[0].text.split("\n") == pdf_factory.CHINESE_PAGES[0]
    assert parsed.pages[1].text.split("\n") == pdf_factory.CHINESE_PAGES[1]
    assert "５６７亿元" in parsed.pages[1].text  # full-width digits are kept as printed
    assert parsed.text_by_page() == {1: parsed.pages[0].text, 2: parsed.pages[1].text}


def test_an_image_only_page_is_flagged_needs_ocr_and_its_neighbours_are_not() -> None:
    parsed = parse_pdf(pdf_factory.mixed_pdf(), max_pages=10)
    assert [p.needs_ocr for p in parsed.pages] == [False, True, False]
    assert parsed.pages[1].text == "" and parsed.pages[1].chars == 0
    assert parsed.pages_needing_ocr == [2]
    assert parse_pdf(pdf_factory.image_only_pdf(), max_pages=1).pages[0].needs_ocr


def test_a_blank_page_has_nothing_to_read_so_it_does_not_need_ocr() -> None:
    page = parse_pdf(pdf_factory.blank_pdf(), max_pages=1).pages[0]
    assert (page.text, page.chars, page.needs_ocr) == ("", 0, False)


class _RecordingOcr:
    def __init__(self, answer: str) -> None:
        self.answer = answer
        self.images: list[PageImage] = []

    def recognize(self, image: PageImage) -> str:
        self.images.append(image)
        return self.answer


def test_an_ocr_engine_reads_only_the_pages_that_need_it_from_a_grayscale_render() -> None:
    engine = _RecordingOcr("Scanned invoice total 42.00")
    parsed = parse_pdf(pdf_factory.mixed_pdf(), max_pages=10, ocr=engine, ocr_dpi=100)
    assert [i.number for i in engine.images] == [2]
    image = engine.images[0]
    assert image.dpi == 100 and len(image.pixels) == image.width * image.height
    assert abs(image.width - 595 * 100 / 72) < 2  # A4 at 100 dpi
    assert len(set(image.pixels)) > 2  # the shapes and the image are in the render
    page = parsed.pages[1]
    assert (page.text, page.needs_ocr, page.from_ocr, page.chars) == ("Scanned invoice total 42.00", False, True, 24)


def test_an_ocr_engine_that_reads_nothing_leaves_the_page_flagged() -> None:
    page = parse_pdf(pdf_factory.image_only_pdf(), max_pages=1, ocr=_RecordingOcr("  ")).pages[0]
    assert page.needs_ocr and not page.from_ocr


@pytest.mark.parametrize("data", [pdf_factory.corrupt_pdf(), pdf_factory.truncated_pdf(), b"", b"hello"],
                         ids=["garbage", "truncated", "empty", "not-a-pdf"])
def test_an_unparseable_file_is_pdf_corrupted_and_not_retryable(data: bytes) -> None:
    with pytest.raises(HearthError) as caught:
        parse_pdf(data, max_pages=10)
    assert caught.value.code == "pdf_corrupted"
    assert not caught.value.retryable and 400 <= caught.value.status < 500


def test_a_password_protected_file_is_pdf_encrypted_not_corrupted() -> None:
    with pytest.raises(HearthError) as caught:
        parse_pdf(pdf_factory.encrypted_pdf(), max_pages=10)
    assert caught.value.code == "pdf_encrypted"
    assert caught.value.details == {"reason": "password_required"}
    assert not caught.value.retryable and caught.value.status == 422


def test_more_pages_than_allowed_is_refused_with_the_counts() -> None:
    data = pdf_factory.english_report(5)
    with pytest.raises(HearthError) as caught:
        parse_pdf(data, max_pages=4)
    assert caught.value.code == "document_too_many_pages"
    assert caught.value.details == {"page_count": 5, "max_pages": 4}
    assert not caught.value.retryable
    assert parse_pdf(data, max_pages=5).page_count == 5


def test_the_new_error_codes_are_client_errors_the_task_engine_does_not_retry() -> None:
    for code in ("pdf_corrupted", "pdf_encrypted", "document_too_many_pages"):
        spec = CATALOG[code]
        assert 400 <= spec.status < 500 and not spec.retryable
        assert classify(HearthError(code)) == ("fail", "input")


def test_parsing_from_several_threads_at_once_is_serialised_and_correct() -> None:
    data = pdf_factory.chinese_report()
    expected = parse_pdf(data, max_pages=5)
    results: list[object] = []
    errors: list[BaseException] = []

    def work() -> None:
        try:
            for _ in range(5):
                results.append(parse_pdf(data, max_pages=5))
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=work) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == [] and results == [expected] * 20


def test_the_lock_is_held_while_pdfium_runs() -> None:
    seen: list[bool] = []

    class Probe:
        def recognize(self, image: PageImage) -> str:
            seen.append(pdf_text.PDFIUM_LOCK._is_owned())  # type: ignore[attr-defined]
            return ""

    parse_pdf(pdf_factory.image_only_pdf(), max_pages=1, ocr=Probe())
    assert seen == [True]


def test_max_pages_must_be_positive() -> None:
    with pytest.raises(ValueError, match="max_pages"):
        parse_pdf(pdf_factory.english_report(1), max_pages=0)


def test_pages_come_back_the_same_across_reopening_windows(monkeypatch: pytest.MonkeyPatch) -> None:
    data = pdf_factory.mixed_pdf()
    whole = parse_pdf(data, max_pages=5)
    monkeypatch.setattr(pdf_text, "REOPEN_EVERY", 2)
    assert parse_pdf(data, max_pages=5) == whole
    monkeypatch.setattr(pdf_text, "REOPEN_EVERY", 1)
    assert parse_pdf(data, max_pages=5) == whole


def test_a_pdf_with_only_an_owner_password_opens_and_is_parsed() -> None:
    parsed = parse_pdf(pdf_factory.owner_password_pdf(), max_pages=1)
    assert parsed.pages[0].text == "Permissions only, no user password."


def test_an_ocr_engine_that_raises_leaves_pdfium_usable() -> None:
    class Broken:
        def recognize(self, image: PageImage) -> str:
            raise RuntimeError("engine down")

    with pytest.raises(RuntimeError, match="engine down"):
        parse_pdf(pdf_factory.mixed_pdf(), max_pages=5, ocr=Broken())
    assert pdf_text.PDFIUM_LOCK.acquire(blocking=False)  # released
    pdf_text.PDFIUM_LOCK.release()
    assert parse_pdf(pdf_factory.mixed_pdf(), max_pages=5).page_count == 3


def test_a_parsed_pdf_round_trips_through_json() -> None:
    parsed = parse_pdf(pdf_factory.mixed_pdf(), max_pages=5, ocr=_RecordingOcr("ocr text here"))
    again = pdf_text.ParsedPdf.from_dict(json.loads(json.dumps(parsed.as_dict())))
    assert again == parsed and again.pages[1].from_ocr
