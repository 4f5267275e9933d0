"""What starts, feeds, watches and kills the side processes, and touches the file system for
them: one side or its ranks, the sandbox they start in, main's compiled cache, checked-out
trees, the hand-over after import, the disk they write. No verdict is made here: the decisions
are gates/rules/'s, the coordinators' gates/accuracy.py and gates/scorer.py."""
