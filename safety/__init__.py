"""Safety: static limits, pre-flight checks, live monitors, journal, rollback, dead-man timers."""
