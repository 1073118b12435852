"""From a page's stored state to its crawl-value parameters: the per-page estimators fed by
crawl outcomes (:mod:`.estimation`) and the rule that picks each parameter's origin
(:mod:`.params`)."""
