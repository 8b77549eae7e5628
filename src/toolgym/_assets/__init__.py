"""Private parts of toolgym.assets: cache layout, registry downloads, builders."""
