"""Agent backends behind one interface (see ``base.py``).

- ``registry.make_agent(settings, **ctx)``: the backend kern.yaml's ``agent.backend`` names
  (``settings``: the typed ``agent`` section; ``registry.agent_settings`` reads it from the
  JSON the agent process is handed)
- ``run``: one attempt's agent as a subprocess (``python -m harness.agents.run``)
- backends: ``tuner``, ``replay``, ``command``, ``anthropic_agent``, ``claude_code``
- ``rules``: which paths an agent may edit (shared by every backend that edits)
- ``common``: minimal environments, time-limited subprocesses, git, transcripts
"""
