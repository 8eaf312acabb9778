"""What the benchmark modules share: the report table and its JSON form."""
from __future__ import annotations

import json
import platform


def report(rows, json_path: str | None = None):
  """Prints rows of (name, stagecraft, jax, unit, target ratio) as a table of ratios, and
  writes them to `json_path` when given. Returns the rows."""
  print(f"machine: {platform.processor() or platform.machine()}, python "
        f"{platform.python_version()}")
  print(f"{'benchmark':36s} {'stagecraft':>12s} {'JAX':>12s} {'ratio':>7s} {'target':>7s}")
  for name, ours, theirs, unit, target in rows:
    print(f"{name:36s} {ours:10.2f}{unit} {theirs:10.2f}{unit} {ours / theirs:7.2f} "
          f"{'<=' + str(target):>7s}")
  if json_path:
    with open(json_path, "w") as f:
      json.dump([dict(name=r[0], stagecraft=r[1], jax=r[2], unit=r[3], ratio=r[1] / r[2],
                      target=r[4]) for r in rows], f, indent=1)
  return rows
