"""From a page's stored state to its crawl-value parameters: the per-page estimators fed by
crawl outcomes (:mod:`.estimation`), the record they are stored in (:mod:`.record`), and the
rule that picks each parameter's origin (:mod:`.params`)."""
