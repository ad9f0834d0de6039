"""Trace readers: each format, and each kind of bad input with its line and column."""

from __future__ import annotations

from pathlib import Path

import pytest

from trafficmgr.sim.traces import TraceError, parse_trace, read_trace

DATA = Path(__file__).resolve().parents[2] / "examples" / "traces"
AZURE_HEAD = "TIMESTAMP,ContextTokens,GeneratedTokens\n"
BURST_HEAD = "Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n"


def test_azure_csv_with_seven_fractional_digits() -> None:
    trace = parse_trace(
        AZURE_HEAD + "2023-11-16 18:17:03.9799600,4808,10\n2023-11-16 18:17:04.0319600,3180,8\n"
    )
    assert trace.format == "azure"
    assert [(r.input_tokens, r.output_tokens) for r in trace.requests] == [(4808, 10), (3180, 8)]
    assert trace.requests[0].at == 0.0
    assert trace.requests[1].at == pytest.approx(0.052, abs=1e-6)


def test_mooncake_jsonl_times_in_ms_and_hashes() -> None:
    trace = parse_trace(
        '{"timestamp": 0, "input_length": 1024, "output_length": 6, '
        '"hash_ids": [1, 2]}\n\n{"timestamp": 1500, "input_length": 10, '
        '"output_length": 1}\n'
    )
    assert trace.format == "mooncake"
    assert trace.requests[1].at == 1.5
    assert trace.requests[0].prefix_hashes == (1, 2)
    assert trace.requests[1].prefix_hashes == ()


def test_burstgpt_csv_keeps_models_and_skips_failed_rows() -> None:
    trace = parse_trace(
        BURST_HEAD + "5,ChatGPT,100,20,120,Conversation log\n"
        "6,GPT-4,50,0,50,API log\n7.5,GPT-4,80,10,90,API log\n"
    )
    assert trace.format == "burstgpt"
    assert [r.model for r in trace.requests] == ["ChatGPT", "GPT-4"]
    assert [r.at for r in trace.requests] == [0.0, 2.5]
    assert "0 response tokens" in trace.warnings[0] and "line 3" in trace.warnings[0]


def test_header_columns_may_come_in_any_order() -> None:
    trace = parse_trace("GeneratedTokens,TIMESTAMP,ContextTokens\n7,12.5,300\n")
    assert (trace.requests[0].input_tokens, trace.requests[0].output_tokens) == (300, 7)


@pytest.mark.parametrize(
    ("text", "line", "column", "words"),
    [
        (AZURE_HEAD + "2023-11-16 18:17:03,abc,10\n", 2, "ContextTokens", "not a number"),
        (AZURE_HEAD + "2023-11-16 18:17:03,nan,10\n", 2, "ContextTokens", "finite"),
        (AZURE_HEAD + "1,2,3\n2,inf,3\n", 3, "ContextTokens", "finite"),
        (AZURE_HEAD + "1,-5,3\n", 2, "ContextTokens", "token count"),
        (AZURE_HEAD + "1,2.5,3\n", 2, "ContextTokens", "token count"),
        (AZURE_HEAD + "1,5,\n", 2, "GeneratedTokens", "missing"),
        (AZURE_HEAD + "yesterday,5,3\n", 2, "TIMESTAMP", "date-time"),
        (AZURE_HEAD + "1,5,3\n2,5\n", 3, None, "expected 3 fields, got 2"),
        (BURST_HEAD + "5,,100,20,120,API log\n", 2, "Model", "empty model"),
        (
            '{"timestamp": 0, "input_length": 5, "output_length": 1}\n{"timestamp": 1,\n',
            2,
            None,
            "invalid JSON",
        ),
        ('{"timestamp": 0, "output_length": 1}\n', 1, "input_length", "missing key"),
        (
            '{"timestamp": "soon", "input_length": 5, "output_length": 1}\n',
            1,
            "timestamp",
            "not a number",
        ),
        ('{"timestamp": NaN, "input_length": 5, "output_length": 1}\n', 1, "timestamp", "finite"),
        (
            '{"timestamp": 0, "input_length": 5, "output_length": 1, "hash_ids": [1, "x"]}\n',
            1,
            "hash_ids",
            "list of integers",
        ),
        (
            '{"timestamp": 0, "input_length": 5, "output_length": 1}\n[1, 2]\n',
            2,
            None,
            "JSON object",
        ),
    ],
)
def test_bad_rows_name_line_and_column(
    text: str, line: int, column: str | None, words: str
) -> None:
    with pytest.raises(TraceError) as caught:
        parse_trace(text, "t.csv")
    err = caught.value
    assert (err.line, err.column) == (line, column)
    assert words in str(err)
    assert str(err).startswith(f"t.csv:{line}")


@pytest.mark.parametrize("text", ["", "\n  \n"])
def test_empty_file_is_an_error(text: str) -> None:
    with pytest.raises(TraceError, match="empty"):
        parse_trace(text)


def test_header_without_rows_is_an_error() -> None:
    with pytest.raises(TraceError, match="no requests"):
        parse_trace(AZURE_HEAD)


def test_wrong_columns_are_an_error_listing_the_formats() -> None:
    with pytest.raises(TraceError) as caught:
        parse_trace("time,prompt,completion\n1,2,3\n", "x.csv")
    assert caught.value.line == 1
    assert "TIMESTAMP,ContextTokens,GeneratedTokens" in str(caught.value)
    assert "BurstGPT" in str(caught.value) and "Mooncake" in str(caught.value)


def test_unsorted_timestamps_are_sorted_with_a_warning() -> None:
    trace = parse_trace(AZURE_HEAD + "10,1,1\n12,2,2\n11,3,3\n13,4,4\n")
    assert [r.input_tokens for r in trace.requests] == [1, 3, 2, 4]
    assert [r.at for r in trace.requests] == [0.0, 1.0, 2.0, 3.0]
    assert "1 rows out of timestamp order (first at line 4)" in trace.warnings[0]


def test_unsorted_timestamps_in_strict_mode_are_an_error() -> None:
    with pytest.raises(TraceError, match="backwards") as caught:
        parse_trace(AZURE_HEAD + "10,1,1\n9,2,2\n", strict=True)
    assert caught.value.line == 3


def test_non_utf8_file_is_an_error(tmp_path: Path) -> None:
    path = tmp_path / "bad.csv"
    path.write_bytes(AZURE_HEAD.encode() + b"1,\xff\xfe,3\n")
    with pytest.raises(TraceError, match="UTF-8"):
        read_trace(str(path))


@pytest.mark.skipif(not DATA.exists(), reason="shared traces not present")
def test_published_traces_read_whole() -> None:
    azure = read_trace(str(DATA / "AzureLLMInferenceTrace_code.csv"))
    mooncake = read_trace(str(DATA / "mooncake_synthetic_trace.jsonl"))
    assert (azure.format, len(azure.requests), azure.warnings) == ("azure", 8819, ())
    assert (mooncake.format, len(mooncake.requests)) == ("mooncake", 3993)
    assert 3400 < azure.duration_s < 3500
    assert mooncake.requests[0].prefix_hashes[:3] == (0, 1, 2)
