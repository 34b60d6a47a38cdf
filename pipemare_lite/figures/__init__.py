"""Figures (chapters 00-12): viz holds pure plotly figure functions, widgets the thin
ipywidgets factories around them.
"""
