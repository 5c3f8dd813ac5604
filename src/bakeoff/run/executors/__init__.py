"""Where a suite's trials execute: :mod:`.local` runs them one after another on this machine."""
