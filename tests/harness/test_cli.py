"""``kern``'s verbs: each verb module registers its own, once, with its help; the CLI only
lists the modules."""
from __future__ import annotations

import argparse

import pytest

from harness import cli

VERBS = {"ops", "test", "bench", "step", "report", "status", "show", "try", "loop", "profile", "doctor", "brief",
         "cancel", "help"}


def verbs_of(register) -> dict:
    """The verbs ``register`` adds to a fresh parser, each with its help text."""
    sub = argparse.ArgumentParser().add_subparsers()
    register(sub)
    return {a.dest: a.help for a in sub._choices_actions}


def test_each_module_registers_only_its_own_verbs_and_together_they_are_the_cli():
    per_module = [verbs_of(m.register) for m in cli.VERB_MODULES]
    names = [n for verbs in per_module for n in verbs]
    assert len(names) == len(set(names)), f"a verb registered by two modules: {names}"
    assert set(names) == VERBS
    assert all(per_module), "a listed module registers no verb"
    assert all(h for verbs in per_module for h in verbs.values()), "a verb without help text"


def test_help_lists_every_verb_with_its_help(capsys):
    with pytest.raises(SystemExit) as e:
        cli.main(["--help"])
    assert e.value.code == 0
    out = "".join(capsys.readouterr().out.split())  # argparse wraps help text at any width
    for m in cli.VERB_MODULES:
        for verb, text in verbs_of(m.register).items():
            assert verb + "".join(text.split()) in out, verb


@pytest.mark.parametrize("verb", sorted(VERBS))
def test_every_verb_parses_and_names_the_function_that_runs_it(verb):
    positional = {"test": ["main"], "try": ["main"], "show": ["1"], "brief": ["moe.experts"],
                  "cancel": ["1"]}.get(verb, [])
    args = cli.parser().parse_args([verb, *positional])
    assert args.verb == verb and callable(args.func)
    assert args.func.__module__ in {m.__name__ for m in cli.VERB_MODULES}


# ---- the conventions a user expects of a CLI ----------------------------------------------------

def subparsers() -> dict:
    p = cli.parser()
    (sub,) = [a for a in p._actions if isinstance(a, argparse._SubParsersAction)]
    return sub.choices


@pytest.mark.parametrize("verb", sorted(VERBS))
def test_every_verb_s_help_has_an_example_and_help_on_every_flag(verb, capsys):
    p = subparsers()[verb]
    bare = [a.option_strings or [a.dest] for a in p._actions if not a.help]
    assert bare == [], f"kern {verb}: arguments without help: {bare}"
    with pytest.raises(SystemExit):
        cli.main([verb, "--help"])
    out = capsys.readouterr().out
    examples = out[out.index("\nexamples:\n"):].splitlines()[2:]
    assert examples and all(ln.startswith(f"  kern {verb}") for ln in examples if ln.strip()), out
    assert "%%" not in out, f"kern {verb} --help prints %%"


def test_kern_bench_help_prints_a_percent_sign(capsys):
    with pytest.raises(SystemExit):
        cli.main(["bench", "--help"])
    out = " ".join(capsys.readouterr().out.split())
    assert "% of the roofline floor" in out and "%%" not in out


def test_version(capsys):
    from importlib.metadata import version

    with pytest.raises(SystemExit) as e:
        cli.main(["--version"])
    assert e.value.code == 0 and capsys.readouterr().out == f"kern {version('kern-loop')}\n"


def test_set_overrides_kern_yaml_for_one_run_before_or_after_the_verb(tmp_path, capsys):
    from harness.ledger import Ledger, default_path
    from tests.harness.test_loop_stops import light_repo

    repo = light_repo(tmp_path, {})
    before = (repo / "kern.yaml").read_bytes()
    Ledger(default_path(repo)).close()
    assert cli.main(["--repo", str(repo), "--set", "budgets.cost_usd=7.5", "status", "--json",
                     "--set", "budgets.attempts=9"]) == 0
    import json

    budget = json.loads(capsys.readouterr().out)["budget"]
    assert (budget["cost_usd"]["limit"], budget["attempts"]["limit"]) == (7.5, 9)
    assert (repo / "kern.yaml").read_bytes() == before  # the file is left as it was
    assert cli.main(["--repo", str(repo), "loop", "--tick", "--set", "loop.every=banana"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("kern: configuration error (edit kern.yaml or correct --set):\n")
    assert "with --set loop.every=banana has 1 problem(s)" in err and "loop.every: expected a duration" in err
    assert cli.main(["--repo", str(repo), "loop", "--tick", "--set", "loop.every"]) == 2
    assert "--set loop.every: expected KEY=VALUE (e.g. --set loop.every=5m), found no '='" in \
        capsys.readouterr().err


def test_kern_help_prints_the_help_of_kern_or_of_a_verb(capsys):
    assert cli.main(["help"]) == 0
    whole = capsys.readouterr().out
    with pytest.raises(SystemExit):
        cli.main(["--help"])
    assert whole == capsys.readouterr().out
    assert cli.main(["help", "cancel"]) == 0
    assert capsys.readouterr().out.startswith("usage: kern cancel [-h] [--reason REASON]")
    assert cli.main(["help", "nope"]) == 2
    assert capsys.readouterr().err.startswith("kern help: no verb 'nope': expected one of bench, brief, cancel")


def test_status_names_an_attempts_target_once():
    from harness.cli.report import titled

    assert titled("moe.combine", "moe.combine: one pass") == "moe.combine: one pass"
    assert titled("moe.combine", "one pass") == "moe.combine: one pass"
    assert titled("", "a manual try") == "-: a manual try"
