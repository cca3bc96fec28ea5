"""Watch (RB-7 step Watch): the loss log read line by line, and the verdict on a resumed run.

Reading: ``logtokens`` (tokens of a line), ``logevents`` (markers), ``logcsv`` (CSV
rows), ``losslog`` (the parser). Judging: ``model`` (the values and verdicts),
``stats``, ``checks``, ``resume``, ``judge``, ``analyze`` (the one decision) and
``session`` (a live feed). Import each name from the module that defines it.
"""
