"""Adapters that let other crawlers serve recrawl's orders (:mod:`streams.integrations.scrapy`)."""
