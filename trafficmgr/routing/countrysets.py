"""Named country sets for residency rules: the EU, the EEA, ASEAN, ... as ISO 3166-1 alpha-2 codes.

Continents are the wrong unit for law: continent ``EU`` holds Russia, Belarus and Ukraine, while
GDPR covers the European Economic Area, which in turn takes in Réunion and Guadeloupe but not
Switzerland. A residency rule therefore names sets (``clients: {sets: [EEA]}``) and gets exactly
their member countries. Every set lives here, once, with its source and the date it was checked;
the fleet file, the API and the engine all read these lists.

Membership changes rarely but does change (Croatia 2013, the UK left in 2020, Timor-Leste joined
ASEAN in 2025): a change is an edit of this module, seen in review, never data fetched at run
time. Names are never removed, so a stored rule never names a set that stopped existing.

Territories with a code of their own are listed where the law covers them and named as
excluded where it does not, so a reader can check the choice.
"""

from __future__ import annotations

from collections.abc import Iterable

from trafficmgr.routing.countries import CONTINENT_OF

# European Union, 27 member states since the United Kingdom left on 2020-02-01.
# Source: europa.eu, "EU countries" (checked 2026-01), TFEU art. 52 and 355.
# ISO codes (Greece is GR, not the EU's own "EL"), plus the parts of member states that ISO
# 3166-1 codes separately but that are inside the EU: the outermost regions of TFEU art. 349
# (French Guiana GF, Guadeloupe GP, Martinique MQ, Réunion RE, Mayotte YT, Saint-Martin MF)
# and Åland AX (art. 355(4)). Outside the EU, so excluded: Faroe Islands FO, Greenland GL,
# Saint-Barthélemy BL (left 2012), the overseas countries and territories of annex II (PM, NC,
# PF, WF, TF, AW, CW, SX, BQ).
_EU27 = (
    "AT BE BG CY CZ DE DK EE ES FI FR GR HR HU IE IT LT LU LV MT NL PL PT RO SE SI SK "
    "AX GF GP MF MQ RE YT"
)
# EFTA: Iceland, Liechtenstein, Norway, Switzerland. Source: efta.int, "EFTA States" (checked
# 2026-01). Svalbard and Jan Mayen SJ and Bouvet Island BV are Norwegian but outside the EEA
# Agreement (its Protocol 40): excluded here and from the EEA.
_EFTA = "CH IS LI NO"
# European Economic Area: the EU plus Iceland, Liechtenstein and Norway (not Switzerland).
# Source: EEA Agreement art. 2 and 126; efta.int, "EEA Agreement" (checked 2026-01). This is
# where GDPR applies (it was incorporated into the EEA Agreement in 2018).
_EEA = f"{_EU27} IS LI NO"
# The EEA with the United Kingdom (UK GDPR) and Switzerland (FADP), the usual "European data
# stays in Europe" scope. GB only: Jersey JE, Guernsey GG, the Isle of Man IM and Gibraltar GI
# are not part of the United Kingdom and have laws of their own.
_EEA_UK_CH = f"{_EEA} GB CH"
# ASEAN: 11 member states since Timor-Leste was admitted at the 47th ASEAN Summit on
# 2025-10-26. Source: asean.org, "Member States" and the Declaration on the Admission of
# Timor-Leste (checked 2026-01).
_ASEAN = "BN ID KH LA MM MY PH SG TH TL VN"
# Gulf Cooperation Council: 6 member states since 1981. Source: gcc-sg.org, "Member States"
# (checked 2026-01).
_GCC = "AE BH KW OM QA SA"
# Five Eyes: the parties to the UKUSA Agreement (complete since 1956). Source: the UK National
# Archives, "UKUSA Agreement release" (checked 2026-01). The five states only, not their
# territories.
_FIVE_EYES = "AU CA GB NZ US"

COUNTRY_SETS: dict[str, frozenset[str]] = {
    "EU27": frozenset(_EU27.split()),
    "EEA": frozenset(_EEA.split()),
    "EEA_UK_CH": frozenset(_EEA_UK_CH.split()),
    "EFTA": frozenset(_EFTA.split()),
    "ASEAN": frozenset(_ASEAN.split()),
    "GCC": frozenset(_GCC.split()),
    "FIVE_EYES": frozenset(_FIVE_EYES.split()),
}

SET_NAMES: tuple[str, ...] = tuple(sorted(COUNTRY_SETS))


class UnknownCountrySet(ValueError):
    """A residency rule names a country set this module does not define."""

    def __init__(self, name: str) -> None:
        self.name = name
        super().__init__(f"unknown country set {name!r} (known: {', '.join(SET_NAMES)})")


def set_countries(names: Iterable[str]) -> frozenset[str]:
    """Return the union of the named sets' countries; raise UnknownCountrySet for a bad name."""
    out: set[str] = set()
    for name in names:
        members = COUNTRY_SETS.get(name)
        if members is None:
            raise UnknownCountrySet(name)
        out |= members
    return frozenset(out)


def covered_countries(
    countries: Iterable[str], continents: Iterable[str], sets: Iterable[str]
) -> frozenset[str]:
    """Return every country a rule's clients cover: its countries, its sets' and its continents'.

    What a map of the rule should shade (unknown set names raise UnknownCountrySet).
    """
    wanted = {c.upper() for c in continents}
    out = {c.upper() for c in countries} | set_countries(sets)
    out.update(c for c, continent in CONTINENT_OF.items() if continent in wanted)
    return frozenset(out)
