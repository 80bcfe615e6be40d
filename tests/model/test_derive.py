"""Catalog models filled from their architecture; typed numbers checked against it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from tests.conftest import plan_example, run_cli

from tierwise.catalog import load_catalog
from tierwise.errors import CatalogError
from tierwise.model.derive import complete_catalog

DATA = Path(__file__).parent / "data"
LLAMA = DATA / "llama-3.1-8b.json"


def test_bundled_typed_numbers_agree_with_architecture() -> None:
    """The chapter's typed Qwen3 numbers all come out of the configs: no warning."""
    cat = complete_catalog(load_catalog())
    assert cat.warnings == ()
    vision = cat.model["qwen3-vl-4b-vision"]
    assert (vision.visual_tokens, vision.feature_width, vision.feature_groups) == (400, 2560, 4)


def test_model_from_path_only(tmp_path: Path) -> None:
    """`architecture = "config.json"` alone (relative to the catalog file) fills every number."""
    (tmp_path / "llama.json").write_text(LLAMA.read_text())
    toml = tmp_path / "cat.toml"
    toml.write_text('[model.llama]\nname = "Llama"\narchitecture = "llama.json"\n')
    spec = complete_catalog(load_catalog([toml])).model["llama"]
    assert spec.parameters == 8_030_261_248
    assert spec.kv_bytes_per_token == 131_072
    assert spec.sources["decode_weight_bytes"] == "derived from the architecture"


def test_inline_architecture_table_and_mismatch_warning(tmp_path: Path) -> None:
    """An inline table works; a typed KV that ignores GQA is a warning naming both numbers."""
    cfg = json.loads(LLAMA.read_text())
    inline = ", ".join(f"{k} = {json.dumps(v)}" for k, v in cfg.items() if k != "_source")
    toml = tmp_path / "cat.toml"
    toml.write_text(
        f'[model.llama]\nname = "Llama"\nkv_bytes_per_token = "524288 B"\n'
        f"architecture = {{ {inline} }}\n"
    )
    cat = complete_catalog(load_catalog([toml]))
    (warning,) = cat.warnings
    assert "model.llama.kv_bytes_per_token" in warning
    assert "524288" in warning and "131072" in warning
    assert cat.model["llama"].kv_bytes_per_token == 524_288


def test_unreadable_architecture_is_catalog_error(tmp_path: Path) -> None:
    """A missing config file names the catalog file, the key and the path."""
    toml = tmp_path / "cat.toml"
    toml.write_text('[model.x]\nname = "X"\narchitecture = "nope.json"\n')
    with pytest.raises(CatalogError, match=r"cat\.toml: model\.x\.architecture: .*nope\.json"):
        load_catalog([toml])


def test_plan_with_architecture_only_model(tmp_path: Path) -> None:
    """A scenario on an architecture-only copy of Qwen3-8B plans exactly as the typed one."""
    cfg = Path(__file__).parents[2] / "src/tierwise/catalog/data/architectures/qwen3-8b.json"
    toml = tmp_path / "cat.toml"
    toml.write_text(f'[model.qwen3-8b]\nname = "Q"\narchitecture = "{cfg}"\n')
    from tierwise.plan.planner import plan
    from tierwise.scenario.loader import bundled_example, load_scenario

    got = plan(load_scenario(bundled_example("deployment")), load_catalog([toml]))
    want = plan_example()
    for site in ("phone", "workstation", "cloud"):
        assert got.option(site).time_s == pytest.approx(want.option(site).time_s, rel=1e-3)


def test_cli_add_model_prints_and_appends(tmp_path: Path) -> None:
    """`catalog add-model` prints an entry; --out appends it and the catalog then lists it."""
    out = tmp_path / "mine.toml"
    run = run_cli("catalog", "add-model", str(LLAMA), "--id", "llama-8b", "--out", str(out))
    assert run.code == 0, run.stderr
    assert "[model.llama-8b]" in run.stdout and "8,030,261,248" in run.stdout
    listed = json.loads(run_cli("catalog", "--catalog", str(out), "--json").stdout)
    assert listed["model"]["llama-8b"]["parameters"] == 8_030_261_248
    again = run_cli("catalog", "add-model", str(LLAMA), "--id", "llama-8b", "--out", str(out))
    assert again.code == 2 and "already exists" in again.stderr


def test_cli_add_model_out_names_config_beside_it(tmp_path: Path) -> None:
    """--out names a config in its folder relatively: the pair plans after a move elsewhere."""
    home = tmp_path / "here"
    (home / "configs").mkdir(parents=True)
    (home / "configs" / "llama.json").write_bytes(LLAMA.read_bytes())
    out = home / "mine.toml"
    run = run_cli("catalog", "add-model", str(home / "configs/llama.json"), "--id", "l8",
                  "--out", str(out))  # fmt: skip
    assert run.code == 0, run.stderr
    assert 'architecture = "configs/llama.json"' in out.read_text()
    moved = home.rename(tmp_path / "there")
    listed = run_cli("catalog", "--catalog", str(moved / "mine.toml"), "--json")
    assert listed.code == 0, listed.stderr
    assert json.loads(listed.stdout)["model"]["l8"]["parameters"] == 8_030_261_248


def test_cli_add_model_bad_config(tmp_path: Path) -> None:
    """A config without hidden_size: one line naming the file and the key, status 2."""
    bad = tmp_path / "config.json"
    bad.write_text('{"num_hidden_layers": 2}')
    run = run_cli("catalog", "add-model", str(bad), "--id", "x")
    assert run.code == 2
    assert "hidden_size" in run.stderr and "config.json" in run.stderr
    assert "Traceback" not in run.stderr and run.stdout == ""


def test_cli_plan_prints_mismatch_warning(tmp_path: Path) -> None:
    """A typed number that disagrees with the architecture is a warning on stderr; plan runs."""
    cfg = Path(__file__).parents[2] / "src/tierwise/catalog/data/architectures/qwen3-8b.json"
    toml = tmp_path / "cat.toml"
    toml.write_text(
        f'[model.qwen3-8b]\nname = "Q"\nkv_bytes_per_token = "589824 B"\narchitecture = "{cfg}"\n'
    )
    run = run_cli("plan", "--catalog", str(toml))
    assert run.code == 0, run.stderr
    assert "warning:" in run.stderr and "kv_bytes_per_token" in run.stderr
    assert "589824" in run.stderr and "147456" in run.stderr


def test_cli_add_model_prints_toml_that_parses_at_any_width(tmp_path: Path) -> None:
    """The printed entry is TOML to keep or pipe: a long path is never wrapped at 60 columns."""
    import os
    import subprocess
    import sys
    import tomllib

    deep = tmp_path / ("a-folder-with-a-long-name-" * 4) / "config.json"
    deep.parent.mkdir(parents=True)
    deep.write_bytes(LLAMA.read_bytes())
    run = subprocess.run(
        [sys.executable, "-c", "from tierwise.cli import main; main()", "catalog", "add-model",
         str(deep), "--id", "llama-8b"],
        capture_output=True, text=True, env={**os.environ, "COLUMNS": "60"}, timeout=60,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr
    entry = tomllib.loads(run.stdout)["model"]["llama-8b"]
    assert entry["architecture"] == str(deep)
