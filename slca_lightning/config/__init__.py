"""Configuration checks: every numeric setting's allowed range (:mod:`.ranges`, one table that
the docs' reference is generated from) and the checks that apply it to a parsed config or
to a class's arguments (:mod:`.checks`)."""
