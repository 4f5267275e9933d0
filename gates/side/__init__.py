"""What runs inside a side's process: the one that imports the candidate's kernel tree.

The loop's process starts it (``gates/launch/process.py``, ``gates/launch/ranks.py``: ``python -m
gates.side.driver MODE``) and reads back only what it writes; every verdict is made on the
loop side (``gates/rules/verdict.py``, ``gates/rules/stats.py``). Nothing in ``harness/`` imports this
package: code here shares its process with the candidate's code, so it measures and
records, and its seal (``tamper.py``) says when that code reached into it.
"""
