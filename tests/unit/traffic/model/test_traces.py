"""Trace readers on the shipped real traces (data/traces/, gzip) and on hand-made bad rows; slicing."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from common.errors import TestbedError
from common.paths import TRACES_DIR
from traffic.model.errors import TrafficError
from traffic.model.traces import AZURE_HEADER, Request, detect_format, read_trace, served_requests, slice_requests


def _real(name: str) -> Path:
    """A shipped trace; missing is a failure, never a skip."""
    path = TRACES_DIR / name
    assert path.is_file(), f"shipped trace {path} is missing (data/traces/ is part of the repo)"
    return path


def _jsonl(tmp_path: Path, rows: list, name: str = "t.jsonl") -> Path:
    path = tmp_path / name
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows))
    return path


def _csv(tmp_path: Path, rows: list[str], name: str = "t.csv") -> Path:
    path = tmp_path / name
    path.write_text("TIMESTAMP,ContextTokens,GeneratedTokens\n" + "".join(r + "\n" for r in rows))
    return path


def _mc(ts=0, i=10, o=5, h=(0,)) -> dict:
    return {"timestamp": ts, "input_length": i, "output_length": o, "hash_ids": list(h)}


# --- real traces -----------------------------------------------------------

def test_mooncake_first_rows():
    res = read_trace(_real("mooncake_conversation.jsonl.gz"))
    assert res.fmt == "mooncake" and res.skipped == 0
    assert len(res.requests) == 12031
    first = res.requests[0]
    assert first == Request(0, 0.0, 6758, 500, tuple(range(14)))
    assert res.requests[1].input_tokens == 7322 and res.requests[1].output_tokens == 490
    assert res.requests[1].hash_ids[:3] == (0, 14, 15)
    assert res.requests[-1].arrival_s == pytest.approx(3536.999)


def test_azure_first_rows():
    res = read_trace(_real("azure2023_conv.csv.gz"))
    assert res.fmt == "azure" and res.skipped == 0
    assert len(res.requests) == 19366
    r0, r1, r2 = res.requests[:3]
    assert (r0.arrival_s, r0.input_tokens, r0.output_tokens, r0.hash_ids) == (0.0, 374, 44, ())
    # 18:15:50.9951690 - 18:15:46.6805900, exact to 100 ns
    assert r1.arrival_s == pytest.approx(4.3145790, abs=1e-9)
    assert (r1.input_tokens, r1.output_tokens) == (396, 109)
    assert r2.arrival_s == pytest.approx(4.5418770, abs=1e-9)
    assert all(b.arrival_s >= a.arrival_s for a, b in zip(res.requests, res.requests[1:]))


def test_explicit_format_matches_real_files():
    assert read_trace(_real("azure2023_conv.csv.gz"), fmt="azure").fmt == "azure"
    with pytest.raises(TestbedError, match="format 'mooncake' was asked for"):
        read_trace(_real("azure2023_conv.csv.gz"), fmt="mooncake")


# --- detection ----------------------------------------------------------------

def test_auto_detect_uses_content_not_extension(tmp_path):
    moon = _jsonl(tmp_path, [_mc()], name="looks_like.csv")
    azure = _csv(tmp_path, ["2023-11-16 18:15:46.6805900,374,44"], name="looks_like.jsonl")
    assert detect_format(moon) == "mooncake" and read_trace(moon).fmt == "mooncake"
    assert detect_format(azure) == "azure" and read_trace(azure).fmt == "azure"


def test_undetectable_and_empty_raise_even_with_skip(tmp_path):
    junk = tmp_path / "junk.txt"
    junk.write_text("hello,world\n1,2\n")
    with pytest.raises(TestbedError, match=r"junk.txt:1: cannot detect trace format"):
        read_trace(junk, skip_bad=True)
    empty = tmp_path / "empty.jsonl"
    empty.write_text("\n  \n")
    with pytest.raises(TestbedError, match="empty"):
        read_trace(empty, skip_bad=True)
    with pytest.raises(TestbedError, match="not found"):
        read_trace(tmp_path / "missing.jsonl")
    with pytest.raises(TestbedError, match="expected one of auto, mooncake, azure"):
        read_trace(junk, fmt="splitwise")


def test_gzip_is_read_by_content_and_gives_the_same_requests(tmp_path):
    import gzip

    plain = _csv(tmp_path, ["2023-11-16 18:15:46.5000000,10,1", "2023-11-16 18:15:48.2500000,20,2"])
    packed = tmp_path / "named_like_plain.csv"  # gzip by content, whatever the name says
    packed.write_bytes(gzip.compress(plain.read_bytes()))
    assert detect_format(packed) == "azure"
    assert read_trace(packed) == read_trace(plain)
    moon = _jsonl(tmp_path, [_mc(ts=0), _mc(ts=5)])
    moon_gz = tmp_path / "t.jsonl.gz"
    moon_gz.write_bytes(gzip.compress(moon.read_bytes()))
    assert read_trace(moon_gz, fmt="mooncake").requests == read_trace(moon).requests


def test_unreadable_traces_are_one_line(tmp_path):
    import gzip

    whole = gzip.compress("".join(json.dumps(_mc(ts=t)) + "\n" for t in range(3000)).encode())
    cut = tmp_path / "cut.jsonl.gz"
    cut.write_bytes(whole[: len(whole) // 2])
    zst = tmp_path / "t.jsonl.zst"
    zst.write_bytes(b"\x28\xb5\x2f\xfd" + b"\0" * 16)
    folder = tmp_path / "folder.jsonl"
    folder.mkdir()
    for path, words in ((cut, "corrupt or truncated gzip"), (zst, "zstd-compressed"), (folder, "is a directory")):
        with pytest.raises(TestbedError) as info:
            read_trace(path)
        assert words in str(info.value) and str(path) in str(info.value) and "\n" not in str(info.value)


def test_header_only_has_no_rows(tmp_path):
    with pytest.raises(TestbedError, match="no valid request rows"):
        read_trace(_csv(tmp_path, []))


# --- bad rows -----------------------------------------------------------------

MOONCAKE_BAD = [
    ({"timestamp": 5, "output_length": 1, "hash_ids": []}, "field 'input_length': missing"),
    (_mc(i=-3), "field 'input_length': is below 1"),
    (_mc(o=-1), "field 'output_length': is below 0"),
    (_mc(i="12x"), "field 'input_length': is a text that is not an integer"),
    (_mc(i=1.5), "field 'input_length': is a fraction, not an integer"),
    (_mc(ts="soon"), "field 'timestamp': is a text, not a number"),
    (_mc(h=(-1,)), "field 'hash_ids': holds something that is not a non-negative integer"),
    ("{not json", "row: invalid JSON"),
    ("[1, 2]", "row: a JSON list"),
    (_mc(ts=1), "field 'timestamp': goes backwards (earlier than the row before)"),
]


@pytest.mark.parametrize("bad,message", MOONCAKE_BAD)
def test_mooncake_bad_row(tmp_path, bad, message):
    path = _jsonl(tmp_path, [_mc(ts=0), _mc(ts=10), bad, _mc(ts=20)])
    with pytest.raises(TestbedError) as info:
        read_trace(path)
    text = str(info.value)
    assert text.startswith(f"{path}:3: ") and message in text and "expected" in text
    assert "\n" not in text
    res = read_trace(path, skip_bad=True)
    assert res.skipped == 1
    assert [r.request_id for r in res.requests] == [0, 1, 3]
    assert [r.arrival_s for r in res.requests] == [0.0, 0.01, 0.02]


AZURE_BAD = [
    ("2023-11-16 18:15:47.0,abc,4", "field 'ContextTokens': is a text that is not an integer"),
    ("2023-11-16 18:15:47.0,-5,4", "field 'ContextTokens': is below 1"),
    ("2023-11-16 18:15:47.0,5,-4", "field 'GeneratedTokens': is below 0"),
    ("yesterday,5,4", "field 'TIMESTAMP': is not a timestamp"),
    ("2023-13-16 18:15:47.0,5,4", "field 'TIMESTAMP': is not a timestamp"),
    ("2023-11-16 18:15:47.0,5", "row: 2 fields"),
    ("2023-11-16 18:15:45.0,5,4", "field 'TIMESTAMP': goes backwards"),
]


@pytest.mark.parametrize("bad,message", AZURE_BAD)
def test_azure_bad_row(tmp_path, bad, message):
    path = _csv(tmp_path, ["2023-11-16 18:15:46.5000000,10,1", bad, "2023-11-16 18:15:48.2500000,20,2"])
    with pytest.raises(TestbedError) as info:
        read_trace(path)
    text = str(info.value)
    assert text.startswith(f"{path}:3: ") and message in text and "expected" in text
    res = read_trace(path, skip_bad=True)
    assert res.skipped == 1
    assert [(r.request_id, r.arrival_s) for r in res.requests] == [(0, 0.0), (2, 1.75)]


def test_all_rows_bad_still_raises(tmp_path):
    path = _jsonl(tmp_path, [_mc(i=-1), _mc(i=-2)])
    with pytest.raises(TestbedError, match=r"no valid request rows \(2 skipped\)"):
        read_trace(path, skip_bad=True)


def test_azure_first_valid_row_is_time_zero(tmp_path):
    path = _csv(tmp_path, ["bad,1,1", "2023-11-16 23:59:59.9,1,1", "2023-11-17 00:00:00.15,1,1"])
    res = read_trace(path, skip_bad=True)
    assert [r.arrival_s for r in res.requests] == [0.0, pytest.approx(0.25, abs=1e-12)]


# --- slicing --------------------------------------------------------------------

REQS = [Request(i, float(t), 100, 10) for i, t in enumerate([0, 1, 2, 3, 4, 5, 6])]


def test_slice_window_rebases_and_keeps_ids():
    out = slice_requests(REQS, start_s=2.0, end_s=5.0)
    assert [(r.request_id, r.arrival_s) for r in out] == [(2, 0.0), (3, 1.0), (4, 2.0)]


def test_served_requests_a_closed_loop_takes_sizes_from_the_start_an_open_one_the_window():
    closed = served_requests(REQS, 2.0, 1.0, 3, 2.0, closed=True)  # no window, no speed: the next three
    assert [(r.request_id, r.arrival_s) for r in closed] == [(2, 2.0), (3, 3.0), (4, 4.0)]
    opened = served_requests(REQS, 2.0, 3.0, None, 2.0, closed=False)
    assert [(r.request_id, r.arrival_s) for r in opened] == [(2, 0.0), (3, 0.5), (4, 1.0)]
    with pytest.raises(TrafficError, match="^mine: no request arrives at or after 7 s"):
        served_requests(REQS, 7.0, 1.0, None, 1.0, closed=True, label="mine")
    with pytest.raises(TrafficError, match=r"^the trace: the window 7 \.\. 8 s holds no request"):
        served_requests(REQS, 7.0, 1.0, None, 1.0, closed=False)


def test_slice_first_n_and_speed():
    out = slice_requests(REQS, start_s=1.5, first_n=2, speed=2.0)
    assert [(r.request_id, r.arrival_s) for r in out] == [(2, 0.25), (3, 0.75)]
    out = slice_requests(REQS, speed=0.5)
    assert out[-1].arrival_s == 12.0 and len(out) == 7
    assert slice_requests(REQS, start_s=100.0) == []


@pytest.mark.parametrize("kwargs,message", [
    ({"speed": 0}, "speed 0"), ({"speed": -1.0}, "speed -1.0"), ({"speed": float("nan")}, "speed"),
    ({"first_n": 0}, "first_n 0"), ({"start_s": -1.0}, "start_s -1.0"),
    ({"start_s": 3.0, "end_s": 2.0}, "end_s 2.0 is not after start_s 3.0"),
])
def test_slice_bad_args(kwargs, message):
    with pytest.raises(TestbedError, match=message):
        slice_requests(REQS, **kwargs)


def test_slice_real_trace_window():
    reqs = read_trace(_real("mooncake_conversation.jsonl.gz")).requests
    out = slice_requests(reqs, start_s=60.0, end_s=120.0, speed=2.0)
    assert out and all(0.0 <= r.arrival_s < 30.0 for r in out)
    assert len(out) == sum(60.0 <= r.arrival_s < 120.0 for r in reqs)


# --- messages name the file and the reason, never its content (issue 28) ----------

SECRET = "s3cr3t-h4sh-XYZ"


@pytest.mark.parametrize("lines,fmt,reason", [
    ([f"root:$6${SECRET}:19000:0:99999:7:::"], "auto",
     "cannot detect trace format: its first line is neither a JSON object nor the Azure CSV header"),
    ([json.dumps({"timestamp": 0, "input_length": 1, "output_length": 1, "hash_ids": [], "k": SECRET})], "azure",
     "format 'azure' was asked for but the file looks like 'mooncake'"),
    ([json.dumps(_mc(ts=0)), json.dumps(_mc(i=SECRET))], "auto", "field 'input_length': is a text that is not"),
    ([json.dumps(_mc(ts=0)), json.dumps(_mc(ts=SECRET))], "auto", "field 'timestamp': is a text, not a number"),
    ([json.dumps(_mc(ts=0)), json.dumps(_mc(h=[SECRET]))], "auto", "field 'hash_ids': holds something"),
    ([",".join(AZURE_HEADER), f"{SECRET},1,1"], "auto", "field 'TIMESTAMP': is not a timestamp"),
    ([",".join(AZURE_HEADER), f"2023-11-16 18:15:47.0,{SECRET},1"], "auto", "field 'ContextTokens': is a text"),
])
def test_a_message_names_the_file_and_the_reason_never_a_piece_of_it(tmp_path, lines, fmt, reason):
    path = tmp_path / "shadow"
    path.write_text("\n".join(lines) + "\n")
    with pytest.raises(TestbedError) as info:
        read_trace(path, fmt=fmt)
    text = str(info.value)
    assert text.startswith(f"{path}:") and reason in text
    assert SECRET not in text and "root:" not in text and "\n" not in text


# ------------------------------------------------------------ the JSON row form
def test_a_plain_request_row_is_four_numbers_and_reads_back():
    r = Request(3, 1.5, 1000, 20)
    assert r.to_row() == [3, 1.5, 1000, 20]
    assert Request.from_row(r.to_row()) == r == Request.from_row([3, 1.5, 1000, 20])


def test_a_session_turn_row_carries_its_hash_ids_session_and_turn():
    r = Request(7, 0.0, 1200, 30, (4, 5, 6), session=2, turn=1)
    row = r.to_row()
    assert row == [7, 0.0, 1200, 30, [4, 5, 6], 2, 1]
    assert json.loads(json.dumps(row)) == row  # plain JSON
    back = Request.from_row(json.loads(json.dumps(row)))
    assert back == r and isinstance(back.hash_ids, tuple)
    assert Request.from_row({"request_id": 7, "arrival_s": 0.0, "input_tokens": 1200, "output_tokens": 30,
                             "hash_ids": [4, 5, 6], "session": 2, "turn": 1}) == r
    assert Request(*row) == r  # what older readers (Request(*r)) do with it
    assert Request(1, 0.0, 600, 5, (9, 10)).to_row() == [1, 0.0, 600, 5, [9, 10], None, 0]  # hash ids, no session


@pytest.mark.parametrize("row, text", [
    ([1, 0.0, 10], "expected a list of 4 to 7 values"),
    ({"request_id": 1, "arrival_s": 0.0, "input_tokens": 5}, "expected request_id, arrival_s"),
    ({"request_id": 1, "arrival_s": 0.0, "input_tokens": 5, "output_tokens": 1, "colour": 2}, "colour"),
])
def test_a_bad_request_row_is_refused_in_one_line(row, text):
    with pytest.raises(TrafficError, match=text):
        Request.from_row(row)
