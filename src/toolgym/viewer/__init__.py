"""The rollout viewer: `toolgym rollouts view FILE` as one HTML page (docs/viewer.md).

A rollout file is read once, streaming, into an index (a byte offset and a summary per episode); the page
lists and filters that index and fetches the episodes it shows, from the `--serve` server or from data
chunks written beside a static page. Nothing here imports torch.
"""
