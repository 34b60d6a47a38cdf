"""The book's tooling: build the site, run and clean notebooks, show engine source,
check the environment, exercises (chapter 00 explains how to use them).
"""
