"""The book as a site: Sphinx + myst-nb + sphinx-book-theme, fed the executed chapters.

- :mod:`~pipemare_lite.book.site.pages`: an executed chapter made ready for its page
  (figures as HTML, widgets as a note, links to the engine's source pages, download link);
- :mod:`~pipemare_lite.book.site.sources`: the engine's source files as highlighted pages;
- :mod:`~pipemare_lite.book.site.project`: the Sphinx project (front page, parts, conf.py,
  local plotly.js and MathJax) and its build.

:func:`pipemare_lite.book.build.build_book` runs the chapters and then this.
"""

from pipemare_lite.book.site.project import SiteChapter, SiteProject, SphinxRun

__all__ = ["SiteChapter", "SiteProject", "SphinxRun"]
