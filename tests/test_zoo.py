"""The zoo (``zoo/``, :mod:`feudal_es.zoo`): every entry reads, names its own checkpoint
and still scores what it recorded on this CPU (within its stated tolerance); a hostile or
broken ``entry.json`` is refused with a clear error, never followed."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from feudal_es import zoo

NAMES = [e["name"] for e in zoo.entries()]


def _entry(root: Path, folder_name: str = "demo", **over) -> Path:
    name = folder_name
    folder = root / name
    folder.mkdir(parents=True)
    data = {"name": name, "env": "feudal_es/Rover-v0", "description": "d", "command": "c",
            "env_steps": 10, "score": {"mean": 0.5, "tolerance": 0.03, "episodes": 4,
                                       "seed": 1}}
    data.update(over)
    (folder / zoo.ENTRY).write_text(json.dumps(data))
    return folder


def test_the_repository_ships_entries_each_with_its_own_checkpoint():
    assert {"rover", "rover_merl", "discovery", "dispersion"} <= set(NAMES)
    for e in zoo.entries():
        files = sorted(p.name for p in e["path"].iterdir())
        assert files == sorted([zoo.ENTRY, e["checkpoint"]]), files
        assert e["checkpoint"].startswith("ckpt_") and e["env_steps"] > 0
        size = (e["path"] / e["checkpoint"]).stat().st_size
        # a few hundred KB each; Coverage's 1.5 MB: LPAC's wide actor, with its Adam
        # moments and the fine-tuning's anchor (a copy of the executor)
        assert size < 2_000_000, (e["name"], size)
        assert zoo.resolve(f"zoo:{e['name']}") == e["path"]


def test_entry_json_is_checked_and_names_are_refused_with_the_closest(tmp_path):
    _entry(tmp_path, "rover")
    assert zoo.entry("rover", tmp_path)["score"]["mean"] == 0.5
    with pytest.raises(ValueError, match="did you mean 'rover'"):
        zoo.resolve("zoo:rovr", tmp_path)
    for bad in ("../rover", "/etc", "Rover", "", "a/b"):
        with pytest.raises(ValueError, match="lower-case letters"):
            zoo.resolve("zoo:" + bad, tmp_path)
    with pytest.raises(ValueError, match="does not name a zoo entry"):
        zoo.resolve("rover", tmp_path)
    cases = [({"name": "other"}, "names itself 'other'"),
             ({"env_steps": "10"}, "field 'env_steps' must be an int"),
             ({"env_steps": True}, "field 'env_steps' must be an int"),
             ({"score": {"mean": "high", "tolerance": 0.1, "episodes": 4, "seed": 1}},
              "score.mean must be a number"),
             ({"score": {"mean": 0.5, "tolerance": 0.1, "episodes": 4.0, "seed": 1}},
              "score.episodes must be an int"),
             ({"command": ["rm", "-rf", "/"]}, "field 'command' must be a string")]
    for i, (over, message) in enumerate(cases):
        name = f"bad{i}"
        _entry(tmp_path, name, **over)
        with pytest.raises(ValueError, match=message):
            zoo.entry(name, tmp_path)
    (tmp_path / "list").mkdir()
    (tmp_path / "list" / zoo.ENTRY).write_text("[1, 2]")
    with pytest.raises(ValueError, match="JSON object"):
        zoo.entry("list", tmp_path)
    (tmp_path / "junk").mkdir()
    (tmp_path / "junk" / zoo.ENTRY).write_text("{not json")
    with pytest.raises(ValueError, match="not readable JSON"):
        zoo.entry("junk", tmp_path)


def test_zoo_command_lists_every_entry(capsys):
    from feudal_es import cli

    assert cli.main(["zoo", "--json"]) == 0
    listed = json.loads(capsys.readouterr().out)
    assert [e["name"] for e in listed] == NAMES
    assert cli.main(["zoo"]) == 0
    out = capsys.readouterr().out
    assert all(f"zoo:{n}" in out for n in NAMES)


def _recorded(name: str) -> tuple[float, float, dict]:
    from experiments.zoo import score

    e = zoo.entry(name)
    s = e["score"]
    return score(f"zoo:{name}", s["episodes"], s["seed"]), s["mean"], s


def test_zoo_rover_evaluates_to_its_score_and_renders(tmp_path):
    """What a newcomer runs on a fresh clone, with no training: the recorded score (its
    own tolerance: another x86-64 CPU may turn a few episodes), and a GIF."""
    from feudal_es import cli

    got, want, s = _recorded("rover")
    assert abs(got - want) <= s["tolerance"], (got, want)
    folder = zoo.entry("rover")["path"]
    before = sorted(p.name for p in folder.iterdir())
    gif = tmp_path / "rover.gif"
    assert cli.main(["render", "zoo:rover", "--out", str(gif)]) == 0
    assert gif.read_bytes()[:6] in (b"GIF87a", b"GIF89a")
    assert sorted(p.name for p in folder.iterdir()) == before  # nothing written there


@pytest.mark.slow  # one compiled evaluation per entry
@pytest.mark.parametrize("name", [n for n in NAMES if n != "rover"])
def test_every_zoo_entry_evaluates_to_its_recorded_score(name):
    e = zoo.entry(name)
    if e["env"].startswith("jaxmarl/"):
        pytest.importorskip("jaxmarl")
    got, want, s = _recorded(name)
    assert abs(got - want) <= s["tolerance"], (got, want)


def test_a_zoo_entry_copied_elsewhere_is_a_run_directory(tmp_path):
    """The folder is an ordinary run directory: ``load_trainer`` finds its checkpoint."""
    from feudal_es.evaluate import load_trainer

    src = zoo.entry("dispersion")["path"]
    shutil.copytree(src, tmp_path / "d")
    trainer, ckpt = load_trainer(tmp_path / "d")
    assert ckpt.name == zoo.entry("dispersion")["checkpoint"]
    assert trainer.config.env == "feudal_es/Dispersion-v0"
