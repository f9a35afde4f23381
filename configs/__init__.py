"""The default configuration, shipped inside the package: `swarm` uses these files when the
folder it runs in has none, and `swarm init` copies them out for editing (swarm/config_files.py).

- swarm.toml: the swarm's settings (every key documented there);
- ladder.toml: the tiers for the built-in bytelm target; ladder-command.toml: for your own
  project (`--target command`), with a budget in your command's unit and free-form dials;
- program.md (program-command.md for your own project) and strategies/: the research direction
  and the personas' first strategies for LLM researchers; llm_prices.toml: USD per million
  tokens per model.
"""
