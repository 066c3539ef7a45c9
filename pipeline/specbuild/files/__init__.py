"""Files written whole and read with care: atomic output folders, capped input readers, printed paths."""
