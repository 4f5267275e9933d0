"""``kern``'s verbs: each verb module registers its own, once, with its help; the CLI only
lists the modules."""
from __future__ import annotations

import argparse

import pytest

from harness import cli

VERBS = {"ops", "test", "bench", "step", "report", "status", "show", "try", "loop", "profile", "doctor"}


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
    positional = {"test": ["main"], "try": ["main"], "show": ["1"]}.get(verb, [])
    args = cli.parser().parse_args([verb, *positional])
    assert args.verb == verb and callable(args.func)
    assert args.func.__module__ in {m.__name__ for m in cli.VERB_MODULES}
