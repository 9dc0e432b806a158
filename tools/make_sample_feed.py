"""Generate ``ndd_stream/data/sample_feed.jsonl``, the news feed bundled for ``ndd-stream demo``.

Why a generator instead of a hand-edited file: the feed must show every way a news item
gets republished (agency updates and repeats, corrections, re-titles, HTML wrapping,
aggregator re-posts, syndication to other channels, a re-post after the 24 h window)
plus the malformed lines a real crawler produces, and a reviewer should be able to read
*why* each line is there. Every story below is fictional and written for this feed.

Every line carries an ``x_note`` saying why it is there and what the default scope
(channel) decides. The variants are calibrated with margins, so the decisions are the
same for any threshold from 0.2 to 0.8 and for both the ``tags`` and ``main`` extraction:
an update adds or changes a sentence of at least 15 words (the ``main`` prose filter
drops shorter lines) and stays above doc_q 0.8, and a text meant to be unique shares
less than 0.2 with its story. tests/test_sample_feed.py holds every note to that.

The output is deterministic (fixed seed, fixed base time, no wall clock): the test
suite regenerates the feed and compares it byte for byte with the committed file.

    python tools/make_sample_feed.py            # (re)write the bundled feed
    python tools/make_sample_feed.py --check    # exit 1 if the committed feed is stale
    python tools/make_sample_feed.py -o FILE    # write elsewhere
"""

from __future__ import annotations

import argparse
import html
import json
import random
import sys
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path
from typing import Any

SEED = 20240311
#: Monday 11 March 2024, 05:00 UTC: hour 0 of the feed; the feed spans about 30 hours.
BASE = datetime(2024, 3, 11, 5, 0, tzinfo=UTC)
CET = timezone(timedelta(hours=1))
ROOT = Path(__file__).resolve().parent.parent
DEFAULT_OUTPUT = ROOT / "ndd_stream" / "data" / "sample_feed.jsonl"

CHANNELS = ("reuters-wire", "ap-feed", "ansa-en", "dpa-intl", "bbc-rss", "aggregator-x")


# --- versions of a story and how they are edited ---------------------------------------
@dataclass(frozen=True)
class Version:
    """One wording of a story: what a channel puts in its title and body."""

    title: str
    paras: tuple[str, ...]
    lang: str = "en"

    def edit(
        self,
        *,
        title: str | None = None,
        add: Sequence[str] = (),
        drop: Sequence[int] = (),
        subs: Sequence[tuple[str, str]] = (),
    ) -> Version:
        """A new version: paragraphs dropped (by index), added at the end, text substituted."""
        paras = [p for i, p in enumerate(self.paras) if i not in set(drop)]
        paras.extend(add)
        new_title = self.title if title is None else title
        for old, new in subs:
            if not any(old in p for p in paras) and old not in new_title:
                raise ValueError(f"substitution {old!r} matches nothing")
            paras = [p.replace(old, new) for p in paras]
            new_title = new_title.replace(old, new)
        return replace(self, title=new_title, paras=tuple(paras))


@dataclass(frozen=True)
class Pub:
    """One publication of a version on a channel at ``hour`` (hours after BASE)."""

    channel: str
    hour: float
    version: Version
    html: bool | None = None  # None: the channel's habit
    text_field: str | None = None  # None: the channel's habit
    note: str = ""  # why this line is in the feed (kept in the item as "x_note")


@dataclass
class Feed:
    """Collects publications and malformed lines, then renders them in event-time order."""

    rng: random.Random
    pubs: list[Pub] = field(default_factory=list)
    broken: list[tuple[float, bytes]] = field(default_factory=list)

    def pub(self, channel: str, hour: float, version: Version, note: str, **kw: Any) -> None:
        assert channel in CHANNELS, channel
        self.pubs.append(Pub(channel, hour, version, note=note, **kw))


# --- the stories ----------------------------------------------------------------------------
# Each function writes one story and publishes its versions. Notes name the expected
# decision under the default scope (channel); "global" marks what only --scope global finds.


def story_port_strike(feed: Feed) -> None:
    v = Version(
        "Dockworkers strike shuts Valmora container port for second day",
        (
            "VALMORA, March 11 (Reuters Wire) - Container traffic at the port of Valmora stood "
            "still for a second day on Monday as about 4,000 dockworkers extended a strike over "
            "automation plans, leaving more than 30 vessels waiting at anchor outside the harbour.",
            "The Valmora Port Workers' Union said its members would stay off the job until the "
            "port authority withdrew a tender for remote-controlled cranes at the new eastern "
            "terminal, which it says would cut some 900 jobs over five years.",
            "\"We are not against modern equipment, we are against a plan that was written "
            "without us,\" union secretary Ilse Marrow told reporters outside the terminal gates, "
            "where several hundred workers had gathered since dawn.",
            "The port authority said in a statement that the tender would create more skilled "
            "jobs than it removed and that it remained open to talks under a mediator appointed "
            "by the transport ministry.",
            "Shipping lines began diverting cargo to the smaller ports of Keshet and Doran Bay, "
            "and freight forwarders warned that perishable goods, including fruit from the "
            "southern provinces, could spoil if the stoppage lasted beyond Wednesday.",
            "Valmora handled about 2.8 million containers last year, making it the region's "
            "third-busiest port.",
        ),
    )
    update = v.edit(
        title="UPDATE 1-Valmora port strike enters second day, mediator to meet both sides",
        add=("Late on Monday the transport ministry said mediator Paul Okafor would meet union "
             "and port representatives on Tuesday morning.",),
    )
    feed.pub("reuters-wire", 0.55, v, "original")
    feed.pub("aggregator-x", 1.20, v, "syndicated copy of reuters-wire (global: exact)")
    feed.pub("bbc-rss", 2.20, v, "syndicated copy, HTML (global: exact)")
    feed.pub("reuters-wire", 1.90, v, "agency repeat of the same story (exact)")
    feed.pub("reuters-wire", 9.40, update, "update: new title, one sentence added (near)")
    feed.pub("aggregator-x", 9.90, update, "re-post of the update (near, of its first copy)")
    feed.pub("ap-feed", 10.3, update, "syndicated copy of the update (global: exact)")


def story_heat_record(feed: Feed) -> None:
    v = Version(
        "Southern town of Castrovento breaks March heat record",
        (
            "CASTROVENTO (AP) - The hill town of Castrovento recorded 31.4 degrees Celsius on "
            "Monday afternoon, the highest March temperature ever measured in the region, the "
            "national weather service said.",
            "The previous record, 29.8 degrees, was set in 1997 at the same station, which has "
            "kept daily readings since 1921.",
            "Local authorities opened two municipal buildings as cooling rooms for elderly "
            "residents and asked farmers to irrigate at night to limit evaporation. Several "
            "schools shortened the school day by an hour.",
            "Meteorologists attributed the heat to a mass of warm air drawn north from the "
            "desert by a slow-moving low-pressure system, and said temperatues would drop by up "
            "to ten degrees from Thursday, when rain is expected.",
            "Climate researchers at the University of Pellona said early-season heat waves had "
            "become roughly three times more frequent in the region than in the 1980s.",
        ),
    )
    fixed = v.edit(subs=(("temperatues", "temperatures"),))
    own = Version(
        "Castrovento swelters as thermometer passes 31C",
        (
            "Residents of Castrovento sought shade in the cathedral square on Monday as the "
            "thermometer climbed past 31C, an unheard-of reading for the middle of March.",
            "Older people were urged to stay indoors during the afternoon, and the town hall "
            "turned its library into a cool room with free water.",
            "Forecasters expect a sharp change later in the week, with storms and a fall of up "
            "to ten degrees.",
        ),
    )
    feed.pub("ap-feed", 8.90, v, "original, with a typo")
    feed.pub("ap-feed", 9.55, fixed, "correction of the typo (near)")
    feed.pub("ap-feed", 9.60, fixed, "repeat of the corrected story (exact)")
    feed.pub("bbc-rss", 10.8, own, "the same event in bbc-rss's own words (unique everywhere)")
    feed.pub("aggregator-x", 11.2, fixed, "syndicated copy (global: exact)")
    feed.pub("aggregator-x", 12.1, fixed, "aggregator re-posts its own copy (exact)")


def story_bridge_de(feed: Feed) -> None:
    v = Version(
        "Sanierung der Elbstadter Hochbrücke verzögert sich um zwei Jahre",
        (
            "Elbstadt (dpa) - Die Sanierung der Hochbrücke in Elbstadt verzögert sich um "
            "mindestens zwei Jahre. Das teilte die Landesstraßenbaubehörde am Montag mit. Grund "
            "seien Risse in mehreren Stahlträgern, die erst bei einer Prüfung im Winter entdeckt "
            "worden seien.",
            "Die Brücke, über die täglich rund 45.000 Fahrzeuge fahren, bleibt für Lastwagen "
            "über 7,5 Tonnen weiterhin gesperrt. Pendler müssen sich zudem auf nächtliche "
            "Vollsperrungen einstellen.",
            "Die Kosten steigen nach Angaben der Behörde von 180 auf voraussichtlich 260 "
            "Millionen Euro. Der Verkehrsausschuss des Landtags will sich in der kommenden Woche "
            "mit dem Projekt befassen.",
            "Die örtliche Industrie- und Handelskammer kritisierte die Verzögerung scharf. Viele "
            "Betriebe im Hafengebiet seien auf die Brücke angewiesen, sagte Hauptgeschäftsführerin "
            "Jana Wöhrle. „Jeder Umweg kostet Zeit und Geld.“",
        ),
        lang="de",
    )
    update = v.edit(
        title="Elbstadt: Brückensanierung dauert länger und wird teurer",
        add=("Ein Sprecher des Verkehrsministeriums sagte am Abend, man prüfe den Bau einer "
             "Behelfsbrücke für den Schwerverkehr.",),
    )
    feed.pub("dpa-intl", 2.10, v, "original (German)")
    feed.pub("aggregator-x", 2.70, v, "syndicated copy (global: exact)")
    feed.pub("dpa-intl", 12.4, update, "update: new title, one sentence added (near)")
    feed.pub("dpa-intl", 12.5, update, "repeat of the update (exact)")
    feed.pub("aggregator-x", 12.9, update, "syndicated update (near, of its first copy)")


def story_cruise_cap(feed: Feed) -> None:
    v = Version(
        "Lagoon city of Sant'Elmo caps daily cruise passengers at 5,000",
        (
            "(ANSA) - SANT'ELMO, MARCH 11 - The city council of Sant'Elmo on Monday voted to cap "
            "the number of cruise passengers allowed to disembark each day at 5,000, citing "
            "overcrowding in the historic centre and damage to the lagoon's fragile banks.",
            "The measure, approved by 21 votes to 9, will take effect in June and applies to "
            "ships with more than 200 berths. Smaller vessels and river boats are exempt.",
            "Mayor Lucia Ferrante called the vote \"a choice for the people who live here\", "
            "while the local port operators' association said the cap would cost the city about "
            "40 million euros a year in lost spending.",
            "Last summer, on peak days, up to 14,000 cruise passengers arrived in a city of fewer "
            "than 50,000 residents. Environmental groups have long argued that wakes from large "
            "ships erode the foundations of waterfront buildings.",
        ),
    )
    rome = v.edit(subs=(("SANT'ELMO, MARCH 11", "ROME, MARCH 11"),))
    it = Version(
        "Sant'Elmo, tetto di 5.000 crocieristi al giorno: sì del consiglio comunale",
        (
            "Il consiglio comunale di Sant'Elmo ha approvato lunedì un tetto di 5.000 crocieristi "
            "al giorno, per proteggere il centro storico e le rive della laguna.",
            "La misura, passata con 21 voti a favore e 9 contrari, entrerà in vigore a giugno e "
            "riguarda le navi con più di 200 cabine. Sono esclusi i battelli fluviali e le "
            "imbarcazioni più piccole.",
            "«È una scelta per chi vive qui», ha detto la sindaca Lucia Ferrante. Gli operatori "
            "portuali temono perdite per circa 40 milioni di euro l'anno.",
            "Nei giorni di punta dell'estate scorsa sono sbarcati fino a 14.000 passeggeri in "
            "una città di meno di 50.000 abitanti.",
        ),
        lang="it",
    )
    feed.pub("ansa-en", 4.05, v, "original")
    feed.pub("ansa-en", 4.60, rome, "re-sent with the dateline changed (near)")
    feed.pub("ansa-en", 4.75, rome, "re-sent once more (exact)")
    feed.pub("aggregator-x", 5.50, it, "Italian version (unique: another language)", html=True)
    feed.pub("aggregator-x", 6.10, it, "Italian version again, plain text (exact: same words)",
             html=False)
    feed.pub("bbc-rss", 6.40, v, "syndicated copy (global: exact)")


def story_rates(feed: Feed) -> None:
    v = Version(
        "Bank of Norland holds rates at 3.75%, signals cut in June",
        (
            "HALDERSUND, March 12 (Reuters Wire) - The Bank of Norland kept its benchmark "
            "interest rate unchanged at 3.75% on Tuesday for a fourth consecutive meeting, but "
            "Governor Annika Veldt said policymakers could start cutting borrowing costs as early "
            "as June if inflation kept easing.",
            "\"The disinflation process is on track, but we want to see a few more months of data "
            "on services prices before we act,\" Veldt told a news conference in the capital.",
            "Annual consumer price inflation slowed to 2.9% in February from 3.4% in January, the "
            "statistics office said last week, the lowest reading in more than two years.",
            "The Norland crown weakened 0.4% against the euro after the decision as traders "
            "brought forward bets on a June cut. Two of the seven members of the monetary policy "
            "committee voted for an immediate reduction of a quarter point.",
            "Economists polled before the meeting had unanimously expected a hold.",
        ),
    )
    update1 = v.edit(
        title="UPDATE 1-Bank of Norland holds rates, governor eyes June cut",
        add=("Veldt said the bank would publish a review of its communication strategy in the "
             "autumn.",),
    )
    followup = Version(
        "Norland lenders see no mortgage relief before summer after central bank hold",
        (
            "HALDERSUND, March 12 (Reuters Wire) - Homeowners in Norland with variable-rate loans "
            "should not expect lower repayments before the summer, the country's largest "
            "lenders said after Tuesday's decision by the central bank.",
            "Haldersund Sparbank, which holds about a quarter of all mortgages, said it had no "
            "plans to change its pricing before the next policy meeting in May, and two smaller "
            "banks said the same.",
            "Opposition finance spokesman Erik Lunde said households with large loans were "
            "paying for a bank that had waited too long. The government declined to comment, "
            "citing the central bank's independence.",
            "New forecasts published alongside the decision put growth at 1.1% this year and "
            "1.6% next year, slightly below the December projections, as weaker exports weigh "
            "on manufacturers in the north.",
        ),
    )
    feed.pub("reuters-wire", 27.05, v, "original")
    feed.pub("dpa-intl", 27.30, v, "syndicated copy (global: exact)")
    feed.pub("reuters-wire", 27.60, update1, "update: new title, one sentence added (near)")
    feed.pub("ap-feed", 27.90, update1, "syndicated update (global: exact)")
    feed.pub("reuters-wire", 28.70, followup,
             "follow-up story on the same event, in new words: not a duplicate (unique)")
    feed.pub("reuters-wire", 28.75, followup, "repeat of the follow-up (exact)")


def story_satellite(feed: Feed) -> None:
    v = Version(
        "Orrery Space launches first weather satellite from Kestrel Island",
        (
            "KESTREL ISLAND (AP) - Private rocket company Orrery Space launched its first "
            "commercial weather satellite on Monday evening from its pad on Kestrel Island, the "
            "company said, after two postponements caused by high winds.",
            "The 180-kilogram satellite, built for the national meteorological agency, reached "
            "its planned orbit about 540 kilometres above Earth roughly 14 minutes after "
            "lift-off, chief executive Dana Whitcombe said.",
            "The satellite carries a microwave sounder designed to measure humidity and "
            "temperature through clouds, data forecasters say is crucial for predicting heavy "
            "rainfall a few days ahead.",
            "Orrery Space, founded in 2016, has flown four test missions, one of which ended with "
            "the loss of the rocket shortly after launch in 2022. The company plans six launches "
            "this year and has signed contracts with customers in three countries.",
        ),
    )
    later = v.edit(
        title="Orrery Space weather satellite reaches orbit",
        subs=(("on Monday evening", "late on Monday"),),
    )
    feed.pub("ap-feed", 14.10, v, "original")
    feed.pub("ap-feed", 14.45, v, "agency repeat (exact)")
    feed.pub("bbc-rss", 14.90, v, "syndicated copy, HTML (global: exact)")
    feed.pub("aggregator-x", 15.20, v, "syndicated copy with tracking script (global: exact)")
    feed.pub("ap-feed", 16.20, later, "re-titled, one phrase changed (near)")
    feed.pub("bbc-rss", 16.60, later, "syndicated re-titled version (near, of its first copy)")


def story_football(feed: Feed) -> None:
    v = Version(
        "Harbury Athletic sack manager Tom Ellery after cup exit",
        (
            "Harbury Athletic have sacked manager Tom Ellery after Saturday's cup defeat by "
            "fourth-tier Colbridge Town, ending a turbulent 18-month spell at the club.",
            "Ellery, 47, won 21 of his 63 games in charge and guided Harbury to a mid-table "
            "finish last season, but the team have won only once in their past 11 league matches "
            "and sit two points above the relegation zone.",
            "In a statement the club thanked Ellery for his work and said first-team coach Marcus "
            "Reid would take charge of training until a permanent successor was appointed.",
            "Supporters had called for a change after the 2-1 defeat, when several hundred fans "
            "stayed behind at the final whistle to protest against the board. Harbury host "
            "leaders Eastmoor Rovers on Saturday.",
        ),
    )
    retitled = v.edit(title="Ellery sacked by struggling Harbury")
    extra = retitled.edit(add=("Former Harbury captain Lee Dunmore, who now coaches the club's "
                               "under-21 side, is the bookmakers' favourite to replace him.",))
    feed.pub("bbc-rss", 5.20, v, "original")
    feed.pub("bbc-rss", 5.70, retitled, "same story re-titled (near)")
    feed.pub("bbc-rss", 5.75, retitled, "the feed sends the re-titled story twice (exact)")
    feed.pub("aggregator-x", 6.00, v, "syndicated copy with tracking script (global: exact)")
    feed.pub("bbc-rss", 7.80, extra, "one sentence added (near)")
    feed.pub("aggregator-x", 8.10, extra, "re-post of the longer version (near)")


def story_wildfire(feed: Feed) -> None:
    v = Version(
        "Wildfire forces evacuation of 2,000 residents in Redcliff Valley",
        (
            "MILLBROOK (AP) - A fast-moving wildfire fanned by dry winds forced about 2,000 "
            "residents of the Redcliff Valley to leave their homes overnight, fire officials said "
            "on Tuesday.",
            "The fire has burned roughly 1,600 hectares of scrub and pine forest since it started "
            "on Monday afternoon near a hiking trail. Its cause is under investigation.",
            "Three homes and several barns were destroyed, but no injuries had been reported, "
            "county fire chief Rosa Delgado said at a briefing. About 350 firefighters, supported "
            "by four water-dropping aircraft, were working to keep the flames away from the town "
            "of Millbrook.",
            "Evacuees were being housed in a school gymnasium and at the county fairgrounds, where "
            "volunteers set up pens for livestock.",
            "Forecasters said winds were expected to ease by Wednesday, which could help crews "
            "contain the blaze.",
        ),
    )
    update = v.edit(drop=(3,), subs=(("roughly 1,600 hectares", "roughly 2,100 hectares"),))
    own = Version(
        "Redcliff Valley fire: thousands flee as flames near Millbrook",
        (
            "MILLBROOK, March 12 (Reuters Wire) - Thousands of people fled the Redcliff Valley "
            "during the night as a wildfire driven by strong, dry winds spread towards the town "
            "of Millbrook.",
            "Officials said the blaze had destroyed three houses. Hundreds of firefighters and "
            "several aircraft were deployed, and a school gymnasium was opened as a shelter.",
        ),
    )
    feed.pub("ap-feed", 22.10, v, "original")
    feed.pub("reuters-wire", 22.40, own, "the same event in reuters-wire's words (unique)")
    feed.pub("aggregator-x", 22.90, own, "syndicated copy of the reuters-wire version "
             "(global: exact)")
    feed.pub("ap-feed", 24.30, update, "update: the fire grew to 2,100 hectares, one paragraph "
             "removed: a new figure, a new report (new: figures)")
    feed.pub("ap-feed", 24.35, update, "repeat of the update (exact)")
    feed.pub("aggregator-x", 24.80, update, "syndicated update (global: exact)")


def story_museum(feed: Feed) -> None:
    v = Version(
        "Renaissance panel stolen from Torreluce civic museum",
        (
            "(ANSA) - TORRELUCE, MARCH 11 - A small Renaissance panel painting depicting Saint "
            "Jerome was stolen from the civic museum of Torreluce overnight, police said on "
            "Monday.",
            "Thieves entered through a skylight in a storage room that was being renovated and "
            "removed the 40-by-30-centimetre panel, attributed to a follower of the painter "
            "Benedetto da Lucca, from a wall in the first-floor gallery.",
            "Museum curator Chiara Belomi said the alarm system had been partly switched off "
            "during the building work. \"It is a wound for the whole town,\" she said.",
            "The carabinieri art squad has circulated images of the work to dealers and auction "
            "houses. The panel, donated to the museum by a local family in 1911, has an insurance "
            "value of about 300,000 euros.",
        ),
    )
    fixed = v.edit(subs=(("Chiara Belomi", "Chiara Bellomi"),))
    feed.pub("ansa-en", 3.05, v, "original, curator's name misspelt")
    feed.pub("ansa-en", 4.40, fixed, "correction of the name (near)")
    feed.pub("ansa-en", 4.45, fixed, "repeat of the correction (exact)")
    feed.pub("aggregator-x", 5.05, fixed, "syndicated correction (global: exact)")
    feed.pub("aggregator-x", 6.70, fixed, "aggregator re-posts it from another source (exact)",
             html=False, text_field="content")


def story_cabin_crew(feed: Feed) -> None:
    v = Version(
        "Luftstern cabin crew to strike on Thursday, 600 flights at risk",
        (
            "FRANKFURT (dpa-intl) - Cabin crew at German carrier Luftstern will walk out for 24 "
            "hours on Thursday, their union said on Monday, threatening about 600 flights and the "
            "travel plans of some 70,000 passengers.",
            "The UFK union said talks on pay and rest periods had broken down after the airline "
            "offered a 6% raise over two years, well short of the 12% the union is seeking for "
            "its 9,000 members.",
            "Luftstern called the strike \"disproportionate\" and said it would publish a reduced "
            "flight schedule on Wednesday. Passengers on cancelled flights would be able to "
            "rebook free of charge or travel by train on domestic routes.",
            "It is the third walkout at the airline this year, after ground staff strikes in "
            "January and February.",
        ),
    )
    update = v.edit(add=("Luftstern said late on Monday that it expected to operate about half "
                         "of its scheduled flights on Thursday, mostly on long-haul routes.",))
    feed.pub("dpa-intl", 1.00, v, "original")
    feed.pub("reuters-wire", 1.50, v, "syndicated copy (global: exact)")
    feed.pub("dpa-intl", 7.00, update, "update: one sentence added (near)")
    feed.pub("reuters-wire", 7.30, update, "syndicated update (near, of its first copy)")
    feed.pub("aggregator-x", 7.40, update, "syndicated update, HTML (global: exact)")
    feed.pub("aggregator-x", 7.45, update, "aggregator posts it twice (exact)")


def story_quake(feed: Feed) -> None:
    v = Version(
        "Magnitude 5.1 quake shakes Lake Orvine region, no casualties reported",
        (
            "SELLIS, March 12 (Reuters Wire) - An earthquake of magnitude 5.1 struck the Lake "
            "Orvine region early on Tuesday, shaking buildings in several towns along the shore, "
            "but there were no immediate reports of casualties, the geological institute said.",
            "The quake hit at 04:12 local time at a depth of about 10 kilometres, with its "
            "epicentre 6 kilometres north of the town of Sellis, the institute said. At least a "
            "dozen aftershocks followed, the strongest of magnitude 3.4.",
            "Firefighters checked older buildings in the historic centre of Sellis, where "
            "chimneys and roof tiles fell into the streets. Schools in three municipalities will "
            "stay closed on Tuesday as a precaution.",
            "The region has a history of moderate earthquakes; a magnitude 5.6 quake in 1978 "
            "damaged hundreds of homes.",
        ),
    )
    revised = v.edit(
        title="Lake Orvine quake revised to magnitude 4.9, no casualties",
        subs=(("magnitude 5.1 struck", "magnitude 4.9 struck"),),
    )
    feed.pub("reuters-wire", 23.30, v, "original")
    feed.pub("ap-feed", 23.80, v, "syndicated copy (global: exact)")
    feed.pub("reuters-wire", 24.60, revised, "magnitude revised, new title (near)")
    feed.pub("ap-feed", 24.90, revised, "syndicated revision (near, of its first copy)")
    feed.pub("reuters-wire", 25.00, revised, "repeat of the revision (exact)")


def story_election(feed: Feed) -> None:
    v = Version(
        "North Caldor election: Green Alliance wins most seats",
        (
            "The Green Alliance has become the largest party in the North Caldor regional "
            "assembly for the first time, winning 24 of the 70 seats in Sunday's election, final "
            "results show.",
            "The centre-right People's Union, which has led the regional government for 16 "
            "years, fell to 21 seats from 29. Turnout was 61%, up four points from the last vote "
            "in 2019.",
            "Green Alliance leader Mira Haslund said she would begin talks with the Social "
            "Democrats, who won 13 seats, and the liberal Civic List, which won 7, about forming "
            "a coalition.",
            "\"People voted for change, for cleaner rivers and cheaper public transport,\" she "
            "told supporters in the regional capital, Tarnholm.",
            "People's Union leader Gregor Stamm conceded defeat but said his party would remain "
            "\"a strong voice for farmers and small businesses\".",
        ),
    )
    title_case = v.edit(title="North Caldor Election: Green Alliance Wins Most Seats")
    update = v.edit(add=("Coalition talks are expected to last several weeks, and the outgoing "
                         "government will stay in office until a new one is sworn in.",))
    feed.pub("bbc-rss", 0.20, v, "original, plain text", html=False, text_field="text")
    feed.pub("bbc-rss", 0.75, title_case, "same story, title case and HTML (exact: the normal "
             "form ignores case, markup and punctuation)")
    feed.pub("aggregator-x", 1.00, v, "syndicated copy (global: exact)")
    feed.pub("bbc-rss", 8.50, update, "one sentence added (near)")
    feed.pub("aggregator-x", 8.90, update, "syndicated update (near, of its first copy)")


def story_walking(feed: Feed) -> None:
    v = Version(
        "Daily walk cuts risk of second heart attack, study finds",
        (
            "By Helen Cray, Health Correspondent",
            "People who walk for at least 30 minutes a day after a heart attack are 38% less "
            "likely to suffer a second one within five years, according to a study of more than "
            "12,000 patients published on Monday.",
            "Researchers at the University of Pellona followed patients treated in 40 hospitals "
            "between 2012 and 2018 and compared those who reported regular walking with those "
            "who did not, taking into account age, smoking, weight and medication.",
            "\"Walking is free, it needs no equipment and almost everyone can do it,\" said lead "
            "author Dr Samuel Achebe. \"Our results suggest it should be part of every recovery "
            "plan.\"",
            "The authors cautioned that the study was observational and could not prove that "
            "walking itself caused the lower risk, since healthier patients may simply be more "
            "able to walk.",
        ),
    )
    staff = v.edit(
        title="Walking 30 minutes a day may prevent repeat heart attacks",
        subs=(("By Helen Cray, Health Correspondent", "By Staff Reporter"),),
    )
    feed.pub("ap-feed", 15.50, v, "original")
    feed.pub("ap-feed", 15.55, v, "agency repeat (exact)")
    feed.pub("aggregator-x", 16.00, v, "syndicated copy (global: exact)")
    feed.pub("aggregator-x", 17.10, staff, "re-post with another byline and title (near)")
    feed.pub("bbc-rss", 17.40, staff, "syndicated re-titled version (global: exact)")


def story_boatbuilder(feed: Feed) -> None:
    v = Version(
        "Last wooden-boat builder on the Morrow river takes on two apprentices",
        (
            "For 52 years, Alfred Penhale has built wooden rowing boats by hand in a shed on the "
            "banks of the Morrow river, using the same oak frames and copper rivets his "
            "grandfather did.",
            "Now 74, and the last professional builder of the traditional Morrow skiff, he has "
            "taken on two apprentices, paid for by a heritage grant of £45,000, to make sure the "
            "craft does not die with him.",
            "\"You can read about it in books, but your hands have to learn it,\" Penhale said, "
            "running a plane along a plank of larch. Each skiff takes about 400 hours to build "
            "and sells for around £9,000.",
            "His apprentices, 19-year-old Ruby Vance and 23-year-old Kofi Mensah, will spend "
            "three years in the shed. The first boat they build on their own will be raced at "
            "the Morrow regatta in 2026.",
        ),
    )
    feed.pub("bbc-rss", 0.50, v, "original feature")
    feed.pub("aggregator-x", 0.85, v, "syndicated copy (global: exact)")
    feed.pub("aggregator-x", 3.30, v, "aggregator re-posts its own copy (exact)")
    feed.pub("aggregator-x", 28.90, v,
             "re-posted 28 hours later: outside the 24 h window (unique)")


def story_storm_de(feed: Feed) -> None:
    v = Version(
        "Unwetterwarnung für das Bergland: Sturmböen bis 110 km/h erwartet",
        (
            "Bergstadt (dpa) - Der Wetterdienst hat für das gesamte Bergland eine "
            "Unwetterwarnung herausgegeben. Ab Dienstagmittag werden Sturmböen mit "
            "Geschwindigkeiten von bis zu 110 Kilometern pro Stunde erwartet, in Gipfellagen "
            "auch Orkanböen.",
            "Die Behörden raten, Aufenthalte im Freien und insbesondere in Wäldern zu vermeiden. "
            "Mehrere Skigebiete kündigten an, ihre Lifte vorsorglich zu schließen.",
            "Die Bahn rechnet mit Einschränkungen auf den Strecken über den Grenzpass. Reisende "
            "sollten sich vor Fahrtantritt über mögliche Ausfälle informieren, hieß es.",
            "Zum Abend hin soll der Wind nach Angaben der Meteorologen allmählich nachlassen. "
            "Für Mittwoch sind Schneefälle bis in tiefe Lagen vorhergesagt.",
        ),
        lang="de",
    )
    update = v.edit(
        title="Sturmwarnung im Bergland: Böen bis 110 km/h, Skilifte bleiben zu",
        add=("Mehrere Schulen im Landkreis schicken ihre Schülerinnen und Schüler am Dienstag "
             "bereits nach der vierten Stunde nach Hause, teilte das Schulamt mit.",),
    )
    feed.pub("dpa-intl", 19.80, v, "original (German)")
    feed.pub("aggregator-x", 20.30, v, "syndicated copy (global: exact)")
    feed.pub("dpa-intl", 22.00, update, "update: new title, one sentence added (near)")
    feed.pub("aggregator-x", 22.30, update, "syndicated update (near, of its first copy)")


def story_markets(feed: Feed) -> None:
    v = Version(
        "Haldersund shares close at record as tech rally extends",
        (
            "HALDERSUND, March 11 (Reuters Wire) - Haldersund's benchmark HX-40 share index "
            "closed at a record high on Monday, rising 1.3% as technology stocks extended a rally "
            "driven by strong quarterly results from chipmaker Veldora Systems.",
            "Veldora jumped 8.7% after reporting a 34% rise in fourth-quarter revenue and raising "
            "its dividend. Software group Nimbra gained 4.1%.",
            "Shipping stocks fell for a second day amid the strike at the port of Valmora, with "
            "container line Baltrex Shipping down 2.9%.",
            "Trading volume was about 20% above the 30-day average. The Norland crown was little "
            "changed against the euro ahead of Tuesday's central bank decision.",
        ),
    )
    corrected = v.edit(
        title="CORRECTED-Haldersund shares close at record as tech rally extends",
        subs=(("Nimbra gained 4.1%", "Nimbra gained 3.1%"),),
    )
    feed.pub("reuters-wire", 11.00, v, "original")
    feed.pub("reuters-wire", 11.65, corrected, "correction of one figure (near)")
    feed.pub("reuters-wire", 11.70, corrected, "repeat of the correction (exact)")
    feed.pub("aggregator-x", 12.00, corrected, "syndicated correction (global: exact)")


def story_library(feed: Feed) -> None:
    v = Version(
        "Floating library opens on Lake Orvine ferry",
        (
            "SELLIS (AP) - Passengers on the morning ferry across Lake Orvine can now borrow "
            "books on board, after the regional transport company converted part of the upper "
            "deck of its oldest vessel into a small library.",
            "The collection of about 1,200 titles, from detective novels to children's picture "
            "books, was donated by residents of the six lakeside towns. Readers may take a book "
            "home and return it on any ferry.",
            "\"Most of our passengers make the same 50-minute crossing every day,\" said "
            "ferry captain Ines Horvat. \"Now they can spend it with a good story instead of a "
            "screen.\"",
            "The company said it would add shelves to a second ferry in the summer if the "
            "scheme proved popular.",
        ),
    )
    feed.pub("ap-feed", 2.40, v, "original")
    feed.pub("ap-feed", 2.45, v, "agency repeat (exact)")
    feed.pub("aggregator-x", 3.10, v, "syndicated copy (global: exact)")
    feed.pub("bbc-rss", 3.60, v, "syndicated copy, HTML (global: exact)")
    feed.pub("aggregator-x", 26.70, v, "aggregator re-post 24 hours later, still in the window "
             "(exact)")


def story_ash_cloud(feed: Feed) -> None:
    v = Version(
        "Ash from Monte Ardo closes Serrano airport for six hours",
        (
            "(ANSA) - SERRANO, MARCH 11 - Serrano airport suspended all flights for six hours on "
            "Monday after the Monte Ardo volcano sent a column of ash about four kilometres into "
            "the sky, the airport operator said.",
            "Twenty-eight departures and arrivals were cancelled and about 40 more were diverted "
            "to airports on the mainland. Runways were cleaned with sweeper trucks before the "
            "airport reopened in the early evening.",
            "The national volcano observatory said the eruption was typical of the lava "
            "fountains Monte Ardo has produced every few weeks since December and posed no "
            "danger to the villages on its slopes.",
            "Residents of Castel Ardo and two nearby towns were asked to wear masks outdoors and "
            "to cover water tanks until the fine black ash had been cleared from streets and "
            "roofs.",
        ),
    )
    reopened = v.edit(
        title="Serrano airport reopens after Monte Ardo ash cloud",
        add=("Flights were expected to run normally on Tuesday, the operator said, although "
             "some airlines had already moved their first departures to the afternoon.",),
    )
    feed.pub("ansa-en", 10.10, v, "original")
    feed.pub("reuters-wire", 10.50, v, "syndicated copy (global: exact)")
    feed.pub("ansa-en", 13.40, reopened, "update: new title, one sentence added (near)")
    feed.pub("ansa-en", 13.45, reopened, "repeat of the update (exact)")
    feed.pub("aggregator-x", 13.90, reopened, "syndicated update (global: exact)")


def story_school_streets(feed: Feed) -> None:
    v = Version(
        "Wexham to close streets outside schools at drop-off time",
        (
            "Cars will be banned from streets outside 14 primary schools in Wexham during the "
            "morning and afternoon school run from September, under plans approved by the "
            "council on Monday.",
            "The roads will be closed to through traffic for 45 minutes at the start and end of "
            "each school day. Residents, blue badge holders and delivery vans will still be "
            "allowed in, and cameras will be used to issue fines of £70.",
            "Council transport lead Priya Natarajan said a year-long trial at three schools had "
            "cut traffic by 60% and encouraged more children to walk or cycle. \"Parents told us "
            "the mornings are calmer and safer,\" she said.",
            "Some businesses near the schools said they feared losing passing trade, and a "
            "petition against the scheme has gathered about 1,100 signatures.",
        ),
    )
    trimmed = v.edit(drop=(3,))
    feed.pub("bbc-rss", 18.60, v, "original")
    feed.pub("bbc-rss", 18.65, v, "the feed sends it twice (exact)")
    feed.pub("aggregator-x", 19.20, v, "syndicated copy (global: exact)")
    feed.pub("bbc-rss", 20.10, trimmed,
             "shortened: last paragraph cut (near)")
    feed.pub("aggregator-x", 20.70, trimmed, "syndicated short version (near, of its first copy)")


STORIES: tuple[Callable[[Feed], None], ...] = (
    story_port_strike, story_heat_record, story_bridge_de, story_cruise_cap, story_rates,
    story_satellite, story_football, story_wildfire, story_museum, story_cabin_crew,
    story_quake, story_election, story_walking, story_boatbuilder, story_storm_de,
    story_markets, story_library, story_ash_cloud, story_school_streets,
)

# --- items published once ---------------------------------------------------------------------
# (channel, hour, title, text): short items that appear once and match nothing.
BRIEFS: tuple[tuple[str, float, str, str], ...] = (
    ("reuters-wire", 0.10, "Copper climbs to six-week high on supply worries",
     "Copper prices rose 1.2% to a six-week high in early trading as a landslide at the "
     "Sarvak mine, one of the region's largest, halted output for what its operator said "
     "could be several days."),
    ("ap-feed", 0.30, "Zoo welcomes rare twin snow leopard cubs",
     "Keepers at the Brennan Hill Zoo said two snow leopard cubs born last month are healthy "
     "and feeding well. Twins are uncommon in the species, and the cubs will be shown to "
     "visitors in May."),
    ("dpa-intl", 0.40, "Berliner Senat beschließt längere Öffnungszeiten für Bibliotheken",
     "Die öffentlichen Bibliotheken der Stadt sollen ab dem Sommer auch sonntags öffnen. Der "
     "Senat stellte dafür zusätzlich 3,2 Millionen Euro bereit. Gewerkschaften begrüßten, dass "
     "neue Stellen geschaffen werden."),
    ("ansa-en", 1.30, "Olive oil harvest up 20% after mild winter",
     "(ANSA) - ROME, MARCH 11 - Italian producers expect this year's olive oil output to rise "
     "by about a fifth after a mild winter and timely rain, the growers' confederation said, "
     "though prices are likely to stay high."),
    ("bbc-rss", 1.60, "Rail line reopens after landslip repairs",
     "The coastal railway between Carrow and Penlee has reopened six weeks after a landslip "
     "buried the track under tonnes of earth. Engineers built a new retaining wall along a "
     "200-metre stretch."),
    ("ap-feed", 2.00, "City council approves bike lanes on Main Street",
     "Councillors in Fairhaven voted 7-2 to replace one lane of traffic on Main Street with "
     "protected bike lanes, despite objections from some shop owners worried about parking."),
    ("reuters-wire", 2.90, "Norland unemployment steady at 4.2% in February",
     "The jobless rate in Norland held at 4.2% in February, the statistics office said, as "
     "hiring in health care offset job losses in construction."),
    ("bbc-rss", 3.50, "School wins national chess title for third year",
     "Pupils from St Aldric's school in Wexham won the national schools chess championship for "
     "the third year running, beating a team from Dunmere in a tense final round."),
    ("dpa-intl", 3.80, "Zulieferer Kranwerk streicht 300 Stellen",
     "Der Autozulieferer Kranwerk will an seinem Stammsitz in Lindau 300 Stellen abbauen. Das "
     "Unternehmen begründete den Schritt mit der schwachen Nachfrage nach Bauteilen für "
     "Verbrennungsmotoren."),
    ("ansa-en", 5.80, "Tourist fined for swimming in historic fountain",
     "(ANSA) - FLORENCE, MARCH 11 - Municipal police fined a 26-year-old tourist 500 euros after "
     "he was filmed swimming in a Renaissance fountain in the city centre late on Sunday night."),
    ("reuters-wire", 6.20, "Grain exporter Harvella posts record annual profit",
     "Agricultural trader Harvella reported a record net profit of 412 million crowns for its "
     "last financial year, helped by strong wheat shipments to North Africa, and proposed a "
     "special dividend."),
    ("ap-feed", 6.80, "Hikers rescued after night on snowy ridge",
     "Mountain rescuers reached two hikers stranded overnight on the Greyfell ridge after they "
     "lost the trail in fog. Both were cold but unhurt and were flown to hospital as a "
     "precaution."),
    ("aggregator-x", 7.20, "Ten tips for a cheaper weekly food shop",
     "Plan your meals, shop with a list, compare prices per kilo and buy seasonal vegetables: "
     "consumer groups say simple habits can cut a family's grocery bill by a fifth."),
    ("bbc-rss", 7.50, "Theatre festival announces summer programme",
     "The Aldwick Theatre Festival will stage 42 productions over three weeks in July, "
     "including a new adaptation of a Victorian ghost story performed entirely by candlelight."),
    ("dpa-intl", 8.20, "Hamburg harbour ferry fares to rise in April",
     "Fares on harbour ferries in Hamburg will rise by an average of 4.9% from April 1, the "
     "transport association said, citing higher fuel and staff costs."),
    ("ansa-en", 8.70, "Sicilian almond growers fear drought damage",
     "(ANSA) - PALERMO, MARCH 11 - Almond farmers in eastern Sicily warned that a third dry "
     "winter in a row could halve this year's crop, and asked the region for emergency "
     "irrigation funds."),
    ("reuters-wire", 10.00, "Telecom operator Linkwave wins 5G spectrum auction",
     "Linkwave paid 1.9 billion crowns for the largest block of 3.5 GHz spectrum in Norland's "
     "5G auction, which raised 4.6 billion crowns in total, the telecom regulator said."),
    ("ap-feed", 11.50, "Rare comet visible to naked eye this week",
     "A comet discovered last year will be visible without a telescope low in the western sky "
     "after sunset this week, astronomers said, best seen away from city lights."),
    ("bbc-rss", 12.20, "Hospital trust to open new cancer centre",
     "A new cancer treatment centre with two radiotherapy machines will open at Southmoor "
     "General Hospital next year, cutting travel times for hundreds of patients."),
    ("aggregator-x", 12.80, "Smartphone sales slip for third quarter in a row",
     "Global smartphone shipments fell 3% year on year in the last quarter, market researchers "
     "said, as consumers keep their phones longer and wait for cheaper models."),
    ("ansa-en", 13.20, "Alpine pass to reopen after avalanche clearance",
     "(ANSA) - AOSTA, MARCH 11 - The road over the Colle della Neve pass will reopen on "
     "Wednesday after crews cleared snow and debris left by two avalanches last week."),
    ("dpa-intl", 13.60, "Münchner Forscher entwickeln Akku aus Natrium",
     "Forschende der Technischen Universität haben einen Natrium-Ionen-Akku vorgestellt, der "
     "ohne Lithium und Kobalt auskommt. Er soll vor allem als Heimspeicher für Solarstrom "
     "dienen."),
    ("reuters-wire", 15.00, "Airline Skyvale orders 30 regional jets",
     "Regional carrier Skyvale ordered 30 turboprop aircraft worth about 800 million dollars at "
     "list prices to replace its ageing fleet from 2026, the company said."),
    ("bbc-rss", 18.00, "Village pub saved by community buyout",
     "Residents of Little Hadden raised £380,000 in shares to buy their village pub, which had "
     "been closed for two years, and plan to reopen it in June with a small shop attached."),
    ("ap-feed", 18.50, "Minor league team unveils new mascot",
     "The Riverton Otters baseball club introduced a new mascot, a giant otter named Splash, "
     "chosen by local schoolchildren in a vote that drew more than 9,000 entries."),
    ("aggregator-x", 19.00, "Scientists map ocean floor off Pacific atoll",
     "An expedition using an autonomous submarine produced the first detailed map of the "
     "seabed around a remote atoll, revealing underwater canyons deeper than 3,000 metres."),
    ("ansa-en", 20.50, "Venice-style gondola race held on Lake Orta",
     "(ANSA) - ORTA, MARCH 11 - More than 40 crews rowed in a gondola race on Lake Orta on "
     "Monday evening, reviving a tradition abandoned in the 1950s."),
    ("reuters-wire", 21.00, "Norland retail sales beat forecasts in February",
     "Retail sales in Norland rose 0.8% month on month in February, beating economists' "
     "forecasts of 0.3%, led by spending on clothes and electronics."),
    ("dpa-intl", 25.20, "Nachtzug nach Wien wird ab Dezember täglich fahren",
     "Die Nachtzugverbindung zwischen Hamburg und Wien soll vom Fahrplanwechsel im Dezember an "
     "täglich statt dreimal pro Woche verkehren, teilte die Bahn mit."),
    ("bbc-rss", 25.90, "Storm warning for northern coasts",
     "Forecasters issued a yellow warning for gales along northern coasts on Wednesday, with "
     "gusts of up to 70 mph possible and a risk of large waves on exposed promenades."),
    ("ap-feed", 26.20, "Library returns book 63 years overdue",
     "A copy of a 1961 bird guide has been returned to the Westbury public library 63 years "
     "after it was borrowed, with a note of apology and a 20-dollar bill inside."),
    ("ansa-en", 27.80, "Fresco uncovered during church restoration",
     "(ANSA) - SIENA, MARCH 12 - Restorers working on a small parish church found a 15th-century "
     "fresco of the Annunciation hidden under layers of plaster."),
    ("aggregator-x", 29.40, "How to keep houseplants alive while on holiday",
     "Group plants together in a cool room, water them deeply before you leave and use a "
     "capillary mat or a wick in a jar of water for longer trips, gardeners advise."),
    ("reuters-wire", 29.70, "Norland government bond yields ease after rate decision",
     "Norland's 10-year government bond yield fell 6 basis points to 3.12% after the central "
     "bank signalled it could cut rates in June."),

    ("bbc-rss", 2.60, "Seal pup found in town centre returned to sea",
     "A young grey seal that wandered half a mile from the harbour into Porthallow's high "
     "street was taken back to the water by volunteers from a marine rescue charity."),
    ("dpa-intl", 4.30, "Frankfurter Messe meldet Besucherrekord",
     "Zur Frühjahrsmesse in Frankfurt kamen nach Angaben der Veranstalter 212.000 Menschen, so "
     "viele wie nie zuvor. Besonders gefragt waren Aussteller aus dem Bereich Handwerk."),
    ("reuters-wire", 5.00, "Baltrex Shipping cuts profit outlook on weak freight rates",
     "Container line Baltrex Shipping lowered its full-year operating profit forecast to "
     "between 300 and 380 million dollars, citing falling freight rates on Asia-Europe routes."),
    ("ap-feed", 9.00, "Recall issued for children's car seats",
     "A manufacturer recalled about 48,000 children's car seats after tests found that a buckle "
     "could release under strong force. Owners can request a free replacement part."),
    ("aggregator-x", 10.60, "Five films to watch this weekend",
     "A heist comedy set in a sleepy seaside town, a documentary about mountain guides and a "
     "restored silent classic lead this weekend's cinema releases."),
    ("ansa-en", 15.80, "Milan metro line extension opens",
     "(ANSA) - MILAN, MARCH 11 - A four-station extension of a Milan metro line opened to "
     "passengers on Monday, linking the northern suburbs to the city centre in 20 minutes."),
    ("reuters-wire", 17.00, "Norland watchdog fines bank over money-laundering controls",
     "Norland's financial supervisor fined Kestrel Savings Bank 95 million crowns for failing to "
     "monitor customer transactions properly between 2019 and 2022."),
    ("dpa-intl", 17.50, "Neue Fahrradbrücke über den Rhein eingeweiht",
     "In Basel ist eine 250 Meter lange Brücke für Radfahrer und Fußgänger eröffnet worden. Sie "
     "verbindet zwei Stadtteile, die bisher nur über eine vielbefahrene Straße erreichbar waren."),
    ("ap-feed", 20.00, "High school robotics team heads to world finals",
     "A team of six students from Lakeside High built a robot that sorts recycling by colour "
     "and will represent the state at the world robotics finals in Texas next month."),
    ("bbc-rss", 23.00, "Broadband upgrade reaches remote islands",
     "Full-fibre broadband has been switched on for more than 2,000 homes on the Skerray "
     "islands after a subsea cable was laid last autumn."),
    ("aggregator-x", 25.50, "Why more people are taking up cold-water swimming",
     "Clubs report record membership as swimmers say cold water helps with stress, though "
     "doctors advise beginners to start slowly and never swim alone."),
    ("ansa-en", 29.20, "Rome to plant 10,000 trees along ring road",
     "(ANSA) - ROME, MARCH 12 - The city will plant 10,000 trees along stretches of its ring "
     "road over the next two years to reduce noise and summer heat, the mayor's office said."),
)


# --- malformed lines ----------------------------------------------------------------------------
def add_broken(feed: Feed) -> None:
    """Lines a real crawler produces now and then; each must end up in the DLQ with a reason."""
    ts = _iso_z(BASE + timedelta(hours=3.2))
    feed.broken += [
        # not_json: a line cut off by a crashed writer
        (3.20, b'{"id": "RW20240311-09001", "channel": "reuters-wire", "title": "Valmora port '
               b'talks to resume", "timestamp": "' + ts.encode() + b'", "text": "Talks between '
               b'the Valmora port authority and'),
        # invalid_utf8: a Latin-1 encoded item ("Citt\xe0" is not UTF-8)
        (6.30, b'{"id": 2024031199001, "channel": "ansa-en", "title": "Citt\xe0 di Torreluce, '
               b'furto al museo", "timestamp": "2024-03-11T12:18:00+01:00", "text": "(ANSA) - '
               b'Un dipinto rinascimentale \xe8 stato rubato dal museo civico."}'),
        # missing_text: metadata only, neither a title nor a body
        (9.70, _line({"id": "ap-feed-0000ff01", "channel": "ap-feed",
                      "timestamp": _epoch(BASE + timedelta(hours=9.7)),
                      "url": "https://ap-feed.example/photos/gallery-0311",
                      "x_note": "malformed: no title, no text (missing_text)"})),
        # empty_text: an HTML body that is only a non-breaking space, and an empty title
        (13.90, _line({"id": "bbc-rss:news-90000001", "channel": "bbc-rss", "title": "",
                       "content": "<p>&nbsp;</p>",
                       "timestamp": _iso_ms(BASE + timedelta(hours=13.9)),
                       "x_note": "malformed: nothing left after extraction (empty_text)"})),
        # bad_timestamp: local wording instead of a time
        (18.20, _line({"id": "urn:newsml:dpa.com:20240311:240311-99-900001",
                       "channel": "dpa-intl", "title": "Hafenfest in Elbstadt abgesagt",
                       "body": "Das für das Wochenende geplante Hafenfest fällt wegen der "
                               "Bauarbeiten an der Hochbrücke aus.",
                       "published_at": "heute, 14:30 Uhr",
                       "x_note": "malformed: unparseable timestamp (bad_timestamp)"})),
        # not_object: a batch written as one JSON array
        (21.60, _line([{"id": "agg-batch-1", "channel": "aggregator-x",
                        "title": "Batch export", "body": "Two items in one array.",
                        "timestamp": _epoch(BASE + timedelta(hours=21.6))}])),
        # bad_field_type: the body is an object instead of text
        (26.00, _line({"id": "agg-0000ff02", "channel": "aggregator-x",
                       "title": "Weekend weather outlook",
                       "body": {"html": "<p>Sunny spells</p>", "lang": "en"},
                       "timestamp": _epoch(BASE + timedelta(hours=26.0)),
                       "x_note": "malformed: body is an object (bad_field_type)"})),
    ]


# --- rendering ---------------------------------------------------------------------------------
_ENTITIES = {"«": "&laquo;", "»": "&raquo;", "€": "&euro;", "£": "&pound;", "–": "&ndash;",
             "„": "&bdquo;", "“": "&ldquo;", "é": "&eacute;"}


def _iso_z(when: datetime) -> str:
    return when.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _iso_ms(when: datetime) -> str:
    return when.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.") + f"{when.microsecond // 1000:03d}Z"


def _iso_cet(when: datetime) -> str:
    return when.astimezone(CET).isoformat(timespec="seconds")


def _epoch(when: datetime) -> int:
    return int(when.timestamp())


def _line(obj: object) -> bytes:
    return json.dumps(obj, ensure_ascii=False).encode("utf-8")


def to_html(version: Version, channel: str, rng: random.Random) -> str:
    """The body as a web page fragment: paragraphs, a link, entities, sometimes a script."""
    paras = []
    for i, para in enumerate(version.paras):
        text = html.escape(para, quote=True)
        for char, entity in _ENTITIES.items():
            text = text.replace(char, entity)
        if i == 0:
            words = text.split(" ")
            k = rng.randrange(1, max(2, len(words) - 3))
            words[k] = f'<a href="https://{channel}.example/topics/{rng.randrange(10**6)}">' \
                       f"{words[k]}</a>"
            text = " ".join(words)
        paras.append(f"<p>{text}</p>")
    body = "\n".join(paras)
    if channel == "aggregator-x":
        tracker = rng.randrange(16**8)
        body = (f'<div class="article-body" data-track="{tracker:08x}">\n{body}\n'
                f"<script>window.aggx = window.aggx || []; aggx.push({{view: '{tracker:08x}'}});"
                "</script>\n</div>")
    return body


_HABITS: dict[str, tuple[str, bool]] = {
    # channel: (body field, HTML?)
    "reuters-wire": ("text", False),
    "ap-feed": ("text", False),
    "ansa-en": ("text", False),
    "dpa-intl": ("body", False),
    "bbc-rss": ("content", True),
    "aggregator-x": ("body", True),
}


class Ids:
    """Channel-specific identities, unique over the whole feed."""

    def __init__(self, rng: random.Random) -> None:
        self.rng = rng
        self.seq: dict[str, int] = {}
        self.seen: set[object] = set()

    def next(self, channel: str, when: datetime) -> str | int:
        n = self.seq[channel] = self.seq.get(channel, 0) + 1
        day = when.strftime("%Y%m%d")
        ident: str | int
        if channel == "reuters-wire":
            ident = f"RW{day}-{n * 7 + 100:05d}"
        elif channel == "ap-feed":
            ident = f"ap-feed-{self.rng.randrange(16**8):08x}"
        elif channel == "ansa-en":
            ident = int(day) * 100000 + 1000 + n  # ANSA numbers its items
        elif channel == "dpa-intl":
            ident = f"urn:newsml:dpa.com:{day}:{day[2:]}-99-{self.rng.randrange(10**6):06d}"
        elif channel == "bbc-rss":
            section = self.rng.choice(("news", "world", "business", "sport"))
            ident = f"bbc-rss:{section}-{self.rng.randrange(10**7, 10**8)}"
        else:
            ident = f"agg-{self.rng.randrange(16**12):012x}"
        if ident in self.seen:
            return self.next(channel, when)
        self.seen.add(ident)
        return ident


def render_pub(pub: Pub, ids: Ids, rng: random.Random) -> bytes:
    """One publication as a JSON line, in its channel's field names and time format."""
    jitter = rng.randrange(0, 50)  # seconds: agencies do not publish on round minutes
    when = BASE + timedelta(hours=pub.hour, seconds=jitter)
    field_name, habit_html = _HABITS[pub.channel]
    field_name = pub.text_field or field_name
    as_html = habit_html if pub.html is None else pub.html
    body = to_html(pub.version, pub.channel, rng) if as_html else "\n\n".join(pub.version.paras)
    item: dict[str, Any] = {"id": ids.next(pub.channel, when), "channel": pub.channel,
                            "title": pub.version.title, field_name: body}
    if pub.channel == "reuters-wire":
        item["timestamp"] = _iso_z(when)
    elif pub.channel == "ap-feed":
        item["timestamp"] = _epoch(when)  # epoch seconds (integer)
    elif pub.channel == "ansa-en":
        item["timestamp"] = _iso_cet(when)  # local time with offset
    elif pub.channel == "dpa-intl":
        item["published_at"] = _iso_cet(when)
    elif pub.channel == "bbc-rss":
        item["timestamp"] = _iso_ms(when)
        item["url"] = f"https://bbc-rss.example/{item['id'].split(':', 1)[1]}"
    else:
        item["timestamp"] = f"{when.timestamp():.1f}"  # epoch seconds as a string
        item["source"] = rng.choice(("wire", "partner", "rss"))
    item["lang"] = pub.version.lang
    if pub.note:
        item["x_note"] = pub.note
    return _line(item)


def story_money_market(feed: Feed) -> None:
    """A templated report: the same wording every day, other figures (issue 11)."""

    def report(day: str, weekday: str, total: int, bills: int, rate: str, bank: int,
               bank_rate: str, shortage: int) -> Version:
        return Version(
            f"Bank of Norland provides {total} mln crowns in money market help",
            (
                f"HALDERSUND, March {day} (Reuters Wire) - The Bank of Norland said it provided "
                f"the money market with {total} mln crowns of assistance in the morning session "
                f"on {weekday}. It bought {bills} mln crowns of treasury bills at {rate} pct "
                f"and {bank} mln crowns of eligible bank bills at {bank_rate} pct.",
                f"Earlier, the bank had forecast a shortage of around {shortage} mln crowns in "
                "the system today, before taking account of its operations.",
            ),
        )

    day1 = report("11", "Monday", 420, 310, "8.25", 110, "8.3125", 600)
    day2 = report("12", "Tuesday", 275, 190, "8.1875", 85, "8.25", 450)
    feed.pub("reuters-wire", 3.10, day1, "original")
    feed.pub("reuters-wire", 3.15, day1, "agency repeat (exact)")
    feed.pub("reuters-wire", 26.90, day2, "the same report for the next day: same template, "
             "other figures, a new report (new: figures)")


def build_pubs(feed: Feed) -> None:
    for story in STORIES:
        story(feed)
    for channel, hour, title, text in BRIEFS:
        lang = "de" if channel == "dpa-intl" and any(c in text for c in "äöüß") else "en"
        feed.pub(channel, hour, Version(title, (text,), lang=lang), "published once (unique)")
    # After the briefs, so the lines and identities of everything above stay as they were.
    story_money_market(feed)
    add_broken(feed)


def build_feed(seed: int = SEED) -> bytes:
    """The whole feed: publications and malformed lines in event-time order, one per line."""
    rng = random.Random(seed)
    feed = Feed(rng)
    build_pubs(feed)
    ids = Ids(rng)
    lines: list[tuple[float, int, bytes]] = []
    for n, pub in enumerate(feed.pubs):
        lines.append((pub.hour, n, render_pub(pub, ids, rng)))
    for n, (hour, raw) in enumerate(feed.broken):
        lines.append((hour, len(feed.pubs) + n, raw))
    lines.sort(key=lambda t: (t[0], t[1]))
    return b"".join(raw + b"\n" for _, _, raw in lines)


def _check_hours(pubs: Iterable[Pub]) -> None:
    for pub in pubs:
        if not 0 <= pub.hour <= 30:
            raise ValueError(f"{pub.version.title!r} at hour {pub.hour}: outside the 30 h span")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("-o", "--output", type=Path, default=DEFAULT_OUTPUT)
    parser.add_argument("--check", action="store_true",
                        help="do not write; exit 1 if the output differs from the generator")
    args = parser.parse_args(argv)
    feed = Feed(random.Random(SEED))
    build_pubs(feed)
    _check_hours(feed.pubs)
    data = build_feed()
    if args.check:
        current = args.output.read_bytes() if args.output.exists() else b""
        if current != data:
            print(f"{args.output} is stale: run python tools/make_sample_feed.py", file=sys.stderr)
            return 1
        print(f"{args.output} is up to date ({len(data.splitlines())} lines)")
        return 0
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_bytes(data)
    print(f"wrote {args.output}: {len(data.splitlines())} lines, {len(data):,} bytes")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
