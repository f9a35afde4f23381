"""Recipes: the editable file every idea changes, as one thing every part of the swarm shares.

- `identity`: a recipe's content address (`recipe_sha`) and its identity for duplicates;
- `patch`: applying an idea's unified diff strictly, and making one;
- `constants`: reading and rewriting the dials at the top of a recipe;
- `fixed`: which of those dials the project holds fixed;
- `store`: every recipe the swarm runs, held once by its hash in a JetStream bucket, so a
  trainer fetches the exact file a RunSpec names and never applies a patch.

Agents, the ladder, trainers and the benchmarks import these; none imports another part's
internals to handle a recipe.
"""
