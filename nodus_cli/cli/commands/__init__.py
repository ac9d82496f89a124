"""Thin command modules: parse options, call the logic below, print the result."""
