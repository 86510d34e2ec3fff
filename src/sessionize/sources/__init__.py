"""Sources: each yields raw records as `value` (string), `error` and `source` (position)."""
