"""Catalog file formats: each module turns one kind of price file into nodus catalog rows.

TODO: the format interface.
"""
