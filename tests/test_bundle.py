"""The sealed bundle: recording, sealing, reading, and tamper detection."""

from __future__ import annotations

import gzip
import io
import json
import os
import signal
import subprocess
import sys
import tarfile
import textwrap
import time
from pathlib import Path

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from pydantic import ValidationError
from support.cli import child_env
from support.recording import Recorder, at, close_all, fault, finding, marathon

from pytest_sremarathon.bundle import FORMAT, BundleWriter, commitment, load_signing_key, open_bundle, pack, verify
from pytest_sremarathon.clock import EPOCH, iso
from pytest_sremarathon.events import GENESIS, TruthFault, canonical, sha256_hex
from pytest_sremarathon.scoring import score_bundle


@pytest.fixture(autouse=True)
def _close_writers():
    yield
    close_all()


@pytest.fixture(scope="module")
def sealed(tmp_path_factory) -> Path:
    """A small but realistic sealed run (kept small so every byte can be flipped)."""
    root = tmp_path_factory.mktemp("sealed")
    rec = marathon(root / "run", n_faults=3, hours=0.75, noise_per_hour=20)
    return rec.writer.archive


def problems_of(path: Path, **kw) -> list[str]:
    result = verify(path, **kw)
    assert not result.ok
    assert result.problems
    return result.problems


def has(problems: list[str], *fragments: str) -> bool:
    return any(all(f in p for f in fragments) for p in problems)


def unpack(archive: Path, dest: Path) -> Path:
    """Extract a sealed archive into a run directory (a tamperer's working copy)."""
    dest.mkdir()
    with tarfile.open(archive) as tf:
        tf.extractall(dest, filter="data")
    return dest


def lines_of(run_dir: Path) -> list[bytes]:
    return (run_dir / "events.jsonl").read_bytes().splitlines()


def write_lines(run_dir: Path, lines: list[bytes]) -> None:
    (run_dir / "events.jsonl").write_bytes(b"".join(line + b"\n" for line in lines))


def rechain(lines: list[bytes]) -> list[bytes]:
    """Renumber and re-link a list of records, as a careful forger would."""
    out, prev = [], GENESIS
    for seq, line in enumerate(lines):
        obj = json.loads(line)
        obj["seq"], obj["prev"] = seq, prev
        new = canonical(obj).encode()
        out.append(new)
        prev = sha256_hex(new)
    return out


def resign(run_dir: Path, key: Ed25519PrivateKey, *, refresh_files: bool = True) -> None:
    """Recompute the manifest (digests, head, count) and sign it with ``key``."""
    manifest = json.loads((run_dir / "manifest.json").read_bytes())
    if refresh_files:
        for name in manifest["files"]:
            manifest["files"][name] = sha256_hex((run_dir / name).read_bytes())
        lines = lines_of(run_dir)
        manifest["events"] = {"count": len(lines), "head": sha256_hex(lines[-1])}
    manifest["public_key"] = key.public_key().public_bytes(serialization.Encoding.Raw,
                                                           serialization.PublicFormat.Raw).hex()
    manifest.pop("signature")
    manifest["signature"] = key.sign(canonical(manifest).encode()).hex()
    (run_dir / "manifest.json").write_text(json.dumps(manifest, sort_keys=True, indent=2) + "\n")


# --------------------------------------------------------------------------- the happy path

def test_sealed_bundle_roundtrip(tmp_path):
    rec = marathon(tmp_path / "run-1", n_faults=4, hours=1.5)
    archive = rec.writer.archive
    assert archive == tmp_path / "run-1.tar.gz" and archive.is_file()

    result = verify(archive)
    assert result.ok, result.problems
    assert result.sealed and not result.truncated
    assert result.events == rec.writer.count and result.head == rec.writer.head

    bundle = open_bundle(archive)
    assert bundle.sealed and not bundle.truncated
    m = bundle.manifest
    assert m["format"] == FORMAT == "sremarathon-bundle/1"
    assert m["run_id"] == "run-1" and m["seed"] == 7 and m["agent"] == "tests.agents:Scripted"
    assert m["scenario_digest"] == "d" * 64
    assert m["events"] == {"count": rec.writer.count, "head": rec.writer.head}
    assert m["public_key"] == rec.writer.public_key
    assert m["wall"] == {"note": "wall-clock stats live in wall.json"}  # manifest_extra
    assert set(m["files"]) == {"events.jsonl", "ground_truth.json", "scenario.yaml", "wall.json",
                               "agent/stderr.log", "agent/reports.jsonl"}
    assert b"step 1: " in bundle.files["agent/stderr.log"]
    assert bundle.ground_truth["salt"] == rec.salt
    assert bundle.ground_truth["schedule"] == rec.schedule
    assert m["ground_truth_commitment"] == commitment(rec.salt, rec.schedule)
    assert bundle.events[0].type == "run.start"
    assert bundle.events[0].data["ground_truth_commitment"] == m["ground_truth_commitment"]
    assert [e.seq for e in bundle.events] == list(range(rec.writer.count))
    assert bundle.events[-1].type == "run.end"

    # The sealed run directory verifies too, and reads the same.
    assert verify(tmp_path / "run-1").ok
    assert open_bundle(tmp_path / "run-1").events == bundle.events


def test_archive_is_a_standard_deterministic_tar_gz(tmp_path):
    key = Ed25519PrivateKey.generate()
    a = marathon(tmp_path / "a" / "run", key=key).writer.archive
    b = marathon(tmp_path / "b" / "run", key=key).writer.archive
    assert a.read_bytes() == b.read_bytes()  # same run, same key: byte-identical bundle

    raw = a.read_bytes()
    assert raw[:4] == b"\x1f\x8b\x08\x10" and raw[4:8] == b"\0\0\0\0"  # no file name, mtime 0
    with gzip.open(a) as gz:
        tar_bytes = gz.read()  # plain gzip reads it (CRC and length checked)
    with tarfile.open(fileobj=io.BytesIO(tar_bytes)) as tf:
        members = tf.getmembers()
    names = [m.name for m in members]
    assert names == sorted(names) and "manifest.json" in names
    for m in members:
        assert (m.isreg(), m.mtime, m.mode, m.uid, m.gid, m.uname, m.gname) == (True, 0, 0o644, 0, 0, "", "")


def test_signing_key_is_used_and_per_run_key_otherwise(tmp_path):
    key = Ed25519PrivateKey.generate()
    pub = key.public_key().public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw).hex()
    a = marathon(tmp_path / "a", key=key, hours=0.5).writer.archive
    b = marathon(tmp_path / "b", hours=0.5).writer.archive
    c = marathon(tmp_path / "c", hours=0.5).writer.archive
    assert open_bundle(a).manifest["public_key"] == pub
    assert verify(a, public_key=pub).ok
    assert open_bundle(b).manifest["public_key"] != open_bundle(c).manifest["public_key"]
    assert has(problems_of(b, public_key=pub), "not the trusted key")


def test_load_signing_key_formats(tmp_path):
    key = Ed25519PrivateKey.generate()
    raw = key.private_bytes(serialization.Encoding.Raw, serialization.PrivateFormat.Raw,
                            serialization.NoEncryption())
    pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                            serialization.NoEncryption())
    for name, content in {"k.pem": pem, "k.raw": raw, "k.hex": raw.hex().encode() + b"\n"}.items():
        (tmp_path / name).write_bytes(content)
        loaded = load_signing_key(tmp_path / name)
        assert loaded.private_bytes(serialization.Encoding.Raw, serialization.PrivateFormat.Raw,
                                    serialization.NoEncryption()) == raw
    (tmp_path / "bad").write_bytes(b"not a key")
    with pytest.raises(ValueError, match="ed25519"):
        load_signing_key(tmp_path / "bad")
    encrypted = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                  serialization.BestAvailableEncryption(b"pw"))
    (tmp_path / "enc.pem").write_bytes(encrypted)
    with pytest.raises(ValueError):
        load_signing_key(tmp_path / "enc.pem")


def test_writer_keeps_scored_records_in_memory_and_everything_on_disk(tmp_path):
    rec = marathon(tmp_path / "run", n_faults=3, hours=1, seal=False)
    on_disk = [json.loads(line)["type"] for line in lines_of(tmp_path / "run")]
    assert "sli" in on_disk and "alert" in on_disk
    kept = {e.type for e in rec.events}
    assert "sli" not in kept and "alert" not in kept
    assert {"run.start", "truth.fault", "truth.alert", "agent.step"} <= kept
    assert [e.seq for e in rec.events] == sorted(e.seq for e in rec.events)


def test_writer_rejects_bad_records(tmp_path):
    with BundleWriter(tmp_path / "run") as w, pytest.raises(ValueError, match="run.start"):
        w.emit(EPOCH, "run.end", {"reason": "completed", "steps": 0})
    rec = Recorder(tmp_path / "run2", [fault("f1")])
    with pytest.raises(ValueError, match="unknown event type"):
        rec.writer.emit(EPOCH, "agent.thought", {})
    with pytest.raises(ValidationError):
        rec.writer.emit(EPOCH, "truth.alert", {"alert": "a1"})  # faults missing
    with pytest.raises(TypeError):
        rec.writer.emit(EPOCH, "truth.alert", TruthFault(id="x", kind="k", app="a", component="c",
                                                          start=iso(EPOCH), planned_end=iso(EPOCH),
                                                          description=""))
    with pytest.raises(ValueError, match="timezone"):
        rec.writer.emit(EPOCH.replace(tzinfo=None), "truth.alert", {"alert": "a1", "faults": []})
    rec.writer.emit(at(5), "truth.alert", {"alert": "a1", "faults": []})
    with pytest.raises(ValueError, match="backwards"):
        rec.writer.emit(at(4), "truth.alert", {"alert": "a2", "faults": []})
    for bad in ("../escape", "/abs", "events.jsonl", "manifest.json", "a//b", ""):
        with pytest.raises(ValueError):
            rec.writer.add_file(bad, b"x")
    assert rec.writer.count == 2  # rejected records were not written
    assert verify(tmp_path / "run2").ok
    with pytest.raises(FileExistsError):
        BundleWriter(tmp_path / "run2")  # never clobber a recorded run


def test_seal_refuses_a_schedule_that_does_not_match_the_commitment(tmp_path):
    rec = Recorder(tmp_path / "run", [fault("f1")])
    rec.end()
    with pytest.raises(ValueError, match="commitment"):
        rec.writer.seal({"schedule": {"faults": []}}, rec.salt)
    with pytest.raises(ValueError, match="commitment"):
        rec.writer.seal({"schedule": rec.schedule}, "another salt")
    with pytest.raises(ValueError, match="manifest_extra"):
        rec.writer.seal({"schedule": rec.schedule}, rec.salt, {"signature": "00"})
    path = rec.writer.seal({"schedule": rec.schedule}, rec.salt)
    assert verify(path).ok
    with pytest.raises(RuntimeError):
        rec.writer.emit(at(1), "run.end", {"reason": "completed", "steps": 0})


def test_commitment_is_salted_and_order_insensitive():
    schedule = {"faults": [{"id": "f1", "start": "x"}], "seed": 1}
    assert commitment("s", schedule) == sha256_hex("s" + canonical(schedule))
    assert commitment("s", {"seed": 1, "faults": [{"start": "x", "id": "f1"}]}) == commitment("s", schedule)
    assert commitment("t", schedule) != commitment("s", schedule)


# --------------------------------------------------------------------------- byte-level tampering

def _assert_flip_fails(raw: bytes, pos: int, mask: int, target: Path) -> None:
    header_end = raw.index(b"\0", 10) + 1  # fixed gzip header + comment
    data = bytearray(raw)
    data[pos] ^= mask
    target.write_bytes(bytes(data))
    result = verify(target)
    assert not result.ok, f"flip {mask:#x} at byte {pos} of {len(raw)} went unnoticed"
    if pos < header_end:
        assert has(result.problems, "archive: gzip header") or has(result.problems, "archive: not a gzip file") \
            or has(result.problems, "archive: compressed data does not match the digest"), (pos, result.problems)
    else:  # deflate data, CRC-32, length
        assert has(result.problems, "archive: compressed data does not match the digest"), (pos, result.problems)


def test_flipping_any_byte_of_the_archive_fails(tmp_path):
    # A small complete bundle, every byte: header, comment, deflate data (including the bits a
    # deflate decoder ignores, such as block padding), CRC-32 and length.
    rec = Recorder(tmp_path / "run", [fault("f1")])
    rec.now = at(10)
    rec.inject("f1")
    rec.alert("a1", "f1")
    rec.now = at(15)
    rec.step([finding("i1", ["a1"], "service:shop/cart")], ["i1"])
    rec.end()
    raw = rec.seal().read_bytes()
    for pos in range(len(raw)):
        for mask in ((0x01, 0x80, 0xFF) if pos % 5 == 0 else (0x01, 0x80)):
            _assert_flip_fails(raw, pos, mask, tmp_path / "flipped.tar.gz")


def test_flipping_bytes_of_a_realistic_archive_fails(sealed, tmp_path):
    raw = sealed.read_bytes()
    header_end = raw.index(b"\0", 10) + 1
    positions = set(range(header_end + 16)) | set(range(len(raw) - 24, len(raw)))
    positions |= set(range(header_end, len(raw), max(1, len(raw) // 80)))
    for pos in sorted(positions):
        for mask in (0x01, 0x40):
            _assert_flip_fails(raw, pos, mask, tmp_path / "flipped.tar.gz")


def test_truncated_or_extended_archive_fails(sealed, tmp_path):
    raw = sealed.read_bytes()
    target = tmp_path / "x.tar.gz"
    for cut in (1, 8, 9, 100, len(raw) // 2, len(raw) - 30):
        target.write_bytes(raw[:-cut])
        assert not verify(target).ok, cut
    target.write_bytes(raw + b"\0")
    assert has(problems_of(target), "does not match the digest")
    target.write_bytes(raw + raw)  # a second gzip member
    assert has(problems_of(target), "archive: ")
    target.write_bytes(b"")
    assert not verify(target).ok


def test_recompressed_archive_with_standard_tools_is_not_canonical(sealed, tmp_path):
    run = unpack(sealed, tmp_path / "run")
    target = tmp_path / "std.tar.gz"
    with tarfile.open(target, "w:gz") as tf:  # real mtimes/owners, gzip header with name+mtime
        for name in sorted(p.relative_to(run).as_posix() for p in run.rglob("*") if p.is_file()):
            tf.add(run / name, arcname=name)
    problems = problems_of(target)
    assert has(problems, "archive: gzip header is not canonical")
    assert has(problems, "archive: tar header of", "is not canonical")
    # … while the contents themselves are intact:
    assert not any(p.startswith(("file ", "events.jsonl", "signature")) for p in problems)


# --------------------------------------------------------------------------- content tampering

@pytest.fixture()
def run_copy(sealed, tmp_path) -> Path:
    return unpack(sealed, tmp_path / "run")


def repack_and_verify(run_dir: Path, **kw) -> list[str]:
    """Pack the tampered directory canonically, then verify both forms with the same result."""
    archive = pack(run_dir, run_dir.with_name("tampered.tar.gz"))
    problems = problems_of(archive, **kw)
    assert problems == problems_of(run_dir, **kw)
    assert not any(p.startswith("archive:") for p in problems)  # the archive layout itself is fine
    return problems


def test_untouched_copy_verifies(run_copy):
    assert verify(run_copy).ok
    assert verify(pack(run_copy, run_copy.with_name("again.tar.gz"))).ok


def test_changed_event_breaks_the_chain(run_copy):
    lines = lines_of(run_copy)
    k = len(lines) // 2
    obj = json.loads(lines[k])
    obj["type"], obj["data"] = "truth.alert", {"alert": "forged", "faults": []}  # still a valid record
    lines[k] = canonical(obj).encode()
    write_lines(run_copy, lines)
    problems = repack_and_verify(run_copy)
    assert has(problems, f"events.jsonl line {k + 2}: prev hash mismatch")
    assert has(problems, "file events.jsonl: digest mismatch")


def test_changed_last_event_breaks_the_head(run_copy):
    lines = lines_of(run_copy)
    obj = json.loads(lines[-1])
    obj["data"]["reason"] = "interrupted"
    lines[-1] = canonical(obj).encode()
    write_lines(run_copy, lines)
    problems = repack_and_verify(run_copy)
    assert has(problems, "events.jsonl: chain head does not match manifest.json")


def test_removed_event(run_copy):
    lines = lines_of(run_copy)
    del lines[10]
    write_lines(run_copy, lines)
    problems = repack_and_verify(run_copy)
    assert has(problems, "events.jsonl line 11: seq is 11, expected 10")
    assert has(problems, "events.jsonl line 11: prev hash mismatch")
    assert has(problems, "events but manifest.json says")


def test_reordered_events(run_copy):
    lines = lines_of(run_copy)
    lines[20], lines[21] = lines[21], lines[20]
    write_lines(run_copy, lines)
    problems = repack_and_verify(run_copy)
    assert has(problems, "events.jsonl line 21: seq is 21, expected 20")
    assert has(problems, "events.jsonl line 21: prev hash mismatch")


def test_appended_event_with_a_valid_link(run_copy):
    lines = lines_of(run_copy)
    last = json.loads(lines[-1])
    extra = {"seq": len(lines), "t": last["t"], "type": "truth.mitigation", "prev": sha256_hex(lines[-1]),
             "data": {"fault": "f00", "mitigated": True, "by": "agent"}}
    write_lines(run_copy, lines + [canonical(extra).encode()])
    problems = repack_and_verify(run_copy)
    assert has(problems, f"events.jsonl: {len(lines) + 1} events but manifest.json says {len(lines)}")
    assert has(problems, "events.jsonl: chain head does not match manifest.json")
    assert has(problems, "file events.jsonl: digest mismatch")


def test_garbage_and_non_canonical_records(run_copy):
    lines = lines_of(run_copy)
    lines[5] = b"{not json"
    lines[6] = json.dumps(json.loads(lines[6]), indent=1).replace("\n", " ").encode()  # same record, respelled
    write_lines(run_copy, lines)
    problems = repack_and_verify(run_copy)
    assert has(problems, "events.jsonl line 6: not valid JSON")
    assert has(problems, "events.jsonl line 7: record is not in canonical JSON form")


def test_rewritten_chain_needs_a_new_signature(run_copy):
    lines = lines_of(run_copy)
    step = next(i for i, line in enumerate(lines) if json.loads(line)["type"] == "agent.step")
    del lines[step]  # hide an agent step, re-link everything, refresh manifest without the key
    write_lines(run_copy, rechain(lines))
    manifest = json.loads((run_copy / "manifest.json").read_bytes())
    new = lines_of(run_copy)
    manifest["files"]["events.jsonl"] = sha256_hex((run_copy / "events.jsonl").read_bytes())
    manifest["events"] = {"count": len(new), "head": sha256_hex(new[-1])}
    (run_copy / "manifest.json").write_text(json.dumps(manifest, sort_keys=True, indent=2) + "\n")
    problems = repack_and_verify(run_copy)
    assert problems == ["signature does not match manifest"]


def test_resigned_forgery_is_caught_only_by_pinning_the_key(run_copy, sealed):
    original_key = open_bundle(sealed).manifest["public_key"]
    lines = lines_of(run_copy)
    del lines[3]
    write_lines(run_copy, rechain(lines))
    resign(run_copy, Ed25519PrivateKey.generate())
    assert verify(run_copy).ok  # self-consistent forgery with a fresh key …
    problems = problems_of(run_copy, public_key=original_key)  # … unless the key is pinned
    assert problems == [p for p in problems if "not the trusted key" in p] and problems


def test_swapped_signature(run_copy, tmp_path):
    other = marathon(tmp_path / "other", n_faults=3, hours=0.75, noise_per_hour=20).writer.archive
    foreign = open_bundle(other).manifest["signature"]
    manifest = json.loads((run_copy / "manifest.json").read_bytes())
    manifest["signature"] = foreign
    (run_copy / "manifest.json").write_text(json.dumps(manifest, sort_keys=True, indent=2) + "\n")
    assert repack_and_verify(run_copy) == ["signature does not match manifest"]


def test_manifest_edits(run_copy):
    path = run_copy / "manifest.json"
    original = path.read_bytes()
    manifest = json.loads(original)

    manifest["seed"] = 8  # any signed field
    path.write_text(json.dumps(manifest, sort_keys=True, indent=2) + "\n")
    problems = repack_and_verify(run_copy)
    assert has(problems, "signature does not match manifest")
    assert has(problems, "manifest.json: seed differs from run.start")

    path.write_bytes(original.replace(b'{\n  "agent"', b'{\n   "agent"'))  # whitespace only
    assert repack_and_verify(run_copy) == ["manifest.json: not in canonical form"]

    manifest = json.loads(original)
    manifest["signature"] = manifest["signature"].upper()  # same signature bytes, other spelling
    path.write_text(json.dumps(manifest, sort_keys=True, indent=2) + "\n")
    assert has(repack_and_verify(run_copy), "manifest.json: signature is not 128 lowercase hex digits")


def test_file_edits(run_copy):
    (run_copy / "agent" / "stderr.log").write_bytes(b"nothing to see here\n")
    (run_copy / "notes.txt").write_text("added later")
    (run_copy / "wall.json").unlink()
    problems = repack_and_verify(run_copy)
    assert sorted(problems) == ["file agent/stderr.log: digest mismatch",
                                "file notes.txt: not listed in manifest",
                                "file wall.json: listed in manifest but missing"]


def test_edited_ground_truth(run_copy, sealed):
    path = run_copy / "ground_truth.json"
    truth = json.loads(path.read_bytes())
    truth["schedule"]["faults"][0]["component"] = "service:shop/elsewhere"
    path.write_text(canonical(truth))
    problems = repack_and_verify(run_copy)
    assert has(problems, "file ground_truth.json: digest mismatch")
    assert has(problems, "ground_truth.json: commitment mismatch")

    # Even with the manifest refreshed and re-signed, the commitment made at run start (inside
    # the hash chain) exposes the edit, and so does the recorded fault.
    resign(run_copy, Ed25519PrivateKey.generate())
    problems = repack_and_verify(run_copy)
    assert not has(problems, "digest mismatch") and not has(problems, "signature")
    assert has(problems, "ground_truth.json: commitment mismatch")
    assert has(problems, "truth.fault 'f", "component differs from the schedule")


def test_recorded_fault_missing_from_the_schedule(tmp_path):
    rec = Recorder(tmp_path / "run", [fault("f1")])
    rec.now = at(10)
    rec.inject("f1")
    rec.faults["ghost"] = fault("ghost")  # recorded, but never committed to
    rec.inject("ghost")
    rec.alert("a1", "f1")
    rec.now = at(20)
    rec.end()
    archive = rec.seal()
    problems = problems_of(archive)
    assert has(problems, "events.jsonl line 3: truth.fault 'ghost' is not in the committed schedule")


def test_alert_attribution_must_match_ground_truth(tmp_path):
    rec = Recorder(tmp_path / "run", [fault("f1")])
    rec.now = at(10)
    rec.inject("f1")
    rec.alert("a1", "f1")
    rec.alert("a2")
    rec.end()
    rec.attribution["a2"] = ["f1"]  # revealed truth disagrees with what was recorded
    problems = problems_of(rec.seal())
    assert has(problems, "truth.alert 'a2' attribution differs from ground_truth.json")


# --------------------------------------------------------------------------- crashed runs

def test_unsealed_directory_is_a_verifiable_prefix(tmp_path):
    rec = marathon(tmp_path / "run", n_faults=3, hours=0.5, seal=False)
    result = verify(tmp_path / "run")
    assert result.ok and not result.sealed and result.truncated
    assert result.events == rec.writer.count and result.head == rec.writer.head
    bundle = open_bundle(tmp_path / "run")
    assert not bundle.sealed and bundle.manifest is None and bundle.ground_truth is None
    with pytest.raises(ValueError, match="not sealed"):
        score_bundle(bundle)
    assert score_bundle(bundle, partial=True).faults


def test_cut_at_every_byte_leaves_a_verifiable_prefix(tmp_path):
    rec = Recorder(tmp_path / "src", [fault("f1"), fault("f2", start=12)])
    rec.now = at(10)
    rec.inject("f1")
    rec.alert("a1", "f1")
    rec.now = at(15)
    rec.step([finding("i1", ["a1"], "service:shop/cart")])
    rec.end()
    raw = (tmp_path / "src" / "events.jsonl").read_bytes()
    ends = [i + 1 for i, b in enumerate(raw) if b == 0x0A]
    run = tmp_path / "cut"
    run.mkdir()
    for cut in range(len(raw) + 1):
        (run / "events.jsonl").write_bytes(raw[:cut])
        result = verify(run)
        assert result.ok, (cut, result.problems)
        assert result.events == sum(1 for e in ends if e <= cut)
        assert not result.sealed and result.truncated
        assert len(open_bundle(run).events) == result.events


def test_corrupted_unsealed_directory_fails(tmp_path):
    marathon(tmp_path / "run", n_faults=2, hours=0.5, seal=False)
    lines = lines_of(tmp_path / "run")
    lines[4] = lines[4].replace(b'"seq":4', b'"seq":5')
    write_lines(tmp_path / "run", lines)
    problems = problems_of(tmp_path / "run")
    assert has(problems, "events.jsonl line 5: seq is 5, expected 4")
    assert has(problems, "events.jsonl line 6: prev hash mismatch")


_WRITER_LOOP = textwrap.dedent("""
    import sys
    from datetime import timedelta
    from support.recording import Recorder, fault, finding, at
    rec = Recorder(__import__("pathlib").Path(sys.argv[1]), [fault("f1")])
    rec.now = at(1)
    rec.inject("f1")
    i = 0
    while True:
        i += 1
        rec.now = rec.now + timedelta(seconds=1)
        rec.alert(f"a{i}", "f1")
        rec.cluster("x" * (i * 997 % 150_000))  # lines from tiny to ~150 kB
        rec.step([finding("inc", [f"a{j}" for j in range(1, i + 1)][-500:])])
""")


@pytest.mark.parametrize("kill_after_bytes", [0, 2_000, 150_000, 1_500_000, 6_000_000])
def test_sigkilled_writer_leaves_a_verifiable_prefix(tmp_path, kill_after_bytes):
    run = tmp_path / "run"
    proc = subprocess.Popen([sys.executable, "-c", _WRITER_LOOP, str(run)], env=child_env())
    events = run / "events.jsonl"
    deadline = time.monotonic() + 60
    try:
        while time.monotonic() < deadline:
            if events.exists() and events.stat().st_size > kill_after_bytes:
                break
            assert proc.poll() is None, "the writer died on its own"
            time.sleep(0.001)
        else:
            pytest.fail("the writer did not get far enough")
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
    assert proc.returncode == -signal.SIGKILL
    result = verify(run)
    assert result.ok, result.problems
    assert not result.sealed and result.truncated and result.events >= 1
    bundle = open_bundle(run)
    assert [e.seq for e in bundle.events] == list(range(result.events))
    score = score_bundle(bundle, partial=True)
    assert score.window_end is not None


# --------------------------------------------------------------------------- size

def test_default_sized_marathon_bundle_stays_small(tmp_path):
    # ~60 faults over 12 h of virtual time, SLI samples every 30 s, a noisy alert stream and an
    # agent that resubmits every finding (with all its alerts) every 5 minutes.
    rec = marathon(tmp_path / "run", n_faults=60, hours=12, noise_per_hour=150)
    size = rec.writer.archive.stat().st_size
    assert size < 20 * 1024 * 1024
    assert size < (tmp_path / "run" / "events.jsonl").stat().st_size / 3  # it does compress
    assert verify(rec.writer.archive).ok


# --------------------------------------------------------------------------- CLI

def test_cli_verify(sealed, tmp_path, capsys):
    from pytest_sremarathon.cli import main

    assert main(["verify", str(sealed)]) == 0
    assert "OK" in capsys.readouterr().out

    run = unpack(sealed, tmp_path / "run")
    (run / "agent" / "stderr.log").write_bytes(b"edited")
    (run / "wall.json").write_bytes(b"{}")
    assert main(["verify", str(run)]) == 1
    out = capsys.readouterr().out.strip().splitlines()
    assert sorted(out) == [f"{run}: file agent/stderr.log: digest mismatch", f"{run}: file wall.json: digest mismatch"]


def test_cli_entry_point_runs_as_a_module(sealed):
    proc = subprocess.run([sys.executable, "-m", "pytest_sremarathon.cli", "verify", str(sealed)],
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
