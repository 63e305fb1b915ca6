"""The match synthesiser: a realistic, deterministic cricket match as a tape.

Owns ``synthesise`` (seed -> Tape) and the fictional teams, players and venues it draws from. It writes
nothing and touches no clock: the same (format, seed) always yields the same tape, byte for byte.

What a synthesised match contains (spec/sportmonks-api.md §6-§9 is the model):
- every kind of wicket (caught, bowled, LBW, stumped incl. off a wide, run out of either batter, hit
  wicket), every kind of extra (wides incl. "5 Wides", no-balls with runs, byes, leg byes), dots, ones to
  sixes, maidens (dot pressure builds within an over), an occasional hat-trick (a bowler on two in two is
  likelier to strike again), a first innings and a chase that ends in a result;
- the feed's mess: about 1 ball in 14 is first posted wrong and corrected one or two entries later (FOUR
  <-> SIX, a run <-> a leg bye, a late-given catch, rarely a wicket overturned), and about 1 in 100 is a
  phantom delivery that is posted and then deleted.
Ball ids increase with gaps, extras repeat the ball number, a new batter takes the dismissed batter's
crease slot and, after a dismissal other than a run out, faces the next ball.

Constants: synthesised matches are in league ``SYNTH_LEAGUE_ID`` (5) and season ``SYNTH_SEASON_ID``; the
fixture id is ``SYNTH_FIXTURE_BASE + format offset + seed`` so every (format, seed) has its own id.
"""

from __future__ import annotations

import random
from collections import Counter
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from daemon.replay.pace import draw_gap_s, mean_gap_s
from daemon.replay.tape import SCORES, Score, Tape, Team

SYNTH_LEAGUE_ID = 5
SYNTH_SEASON_ID = 9005
SYNTH_STAGE_ID = 90051
SYNTH_FIXTURE_BASE = 9_000_000
_FORMAT_OFFSET = {"T20": 0, "ODI": 1_000_000, "T10": 2_000_000}
_FORMAT_OVERS = {"T20": 20, "ODI": 50, "T10": 10}
SYNTH_EPOCH = datetime(2026, 1, 1, 9, 0, tzinfo=UTC)

# Fictional franchises (id, name, code). Team ids are stable, so a team's squad is the same in every match.
TEAM_POOL: tuple[tuple[int, str, str], ...] = (
    (9001, "Harbour Hawks", "HHK"),
    (9002, "Riverside Rangers", "RVR"),
    (9003, "Highland Comets", "HCO"),
    (9004, "Coastal Kings", "CKG"),
    (9005, "Metro Mavericks", "MMV"),
    (9006, "Valley Vipers", "VVP"),
    (9007, "Capital Chargers", "CCH"),
    (9008, "Desert Falcons", "DFL"),
)
VENUE_POOL: tuple[tuple[int, str, str], ...] = (
    (9101, "Harbourside Oval", "Port Elms"),
    (9102, "Riverside Park", "Ashford"),
    (9103, "Summit Ground", "Kellan"),
    (9104, "Bayview Stadium", "Marlow Bay"),
)
_FIRST = (
    "Arjun",
    "Ben",
    "Callum",
    "Dev",
    "Ethan",
    "Farhan",
    "George",
    "Hamid",
    "Isaac",
    "Jasprit",
    "Kane",
    "Liam",
    "Mitchell",
    "Nathan",
    "Omar",
    "Pat",
    "Quinton",
    "Rashid",
    "Sam",
    "Tom",
    "Usman",
    "Vikram",
    "Will",
    "Yash",
    "Zak",
    "Aiden",
    "Babar",
    "Chris",
    "Dinesh",
    "Eoin",
)
_LAST = (
    "Abbott",
    "Bairstow",
    "Carey",
    "Dar",
    "Evans",
    "Fernando",
    "Green",
    "Hussain",
    "Iyer",
    "Jordan",
    "Khan",
    "Lyon",
    "Malan",
    "Nair",
    "Owen",
    "Patel",
    "Qadir",
    "Rana",
    "Stokes",
    "Taylor",
    "Umar",
    "Vance",
    "Wood",
    "Young",
    "Zampa",
    "Ahmed",
    "Bracewell",
    "Cummins",
    "Dale",
    "Ellis",
)
_BATTING_STYLES = ("right-hand-bat", "left-hand-bat")
_PACE = ("right-arm-fast", "right-arm-fast-medium", "left-arm-fast-medium", "right-arm-medium")
_SPIN = ("right-arm-offbreak", "slow-left-arm-orthodox", "legbreak-googly")

# score ids by outcome (see tape.SCORES)
_RUNS = {0: 82, 1: 69, 2: 70, 3: 71, 4: 47, 6: 53}
_WIDES = {1: 17, 2: 204, 5: 52}
_NOBALLS = {0: 7, 1: 8, 2: 207, 4: 205, 6: 206}
_BYES = {1: 1, 2: 201, 4: 41}
_LEG_BYES = {1: 4, 2: 202, 4: 203}
_WICKET = {"caught": 54, "bowled": 79, "lbw": 210, "stumped": 211, "run out": 212, "hit wicket": 214}
_RUN_OUT_1 = 213
_WIDE_STUMPED = 215
# A wrong first posting and its correction keep the number of runs' parity, so who faces next stays right.
_CONFUSIONS = {47: 53, 53: 47, 69: 4, 4: 69, 1: 69, 70: 82, 82: 70}


@dataclass
class _Side:
    team: Team
    players: list[dict[str, Any]]  # batting order, SportMonks player objects
    keeper: int  # player id
    captain: int
    bowlers: list[int]  # player ids, strike bowlers first
    spinners: set[int] = field(default_factory=set)

    @property
    def ids(self) -> list[int]:
        return [p["id"] for p in self.players]


def _squad(team: Team) -> _Side:
    """A team's eleven, the same every time (seeded by the team id)."""
    rng = random.Random(f"squad-{team.id}")
    players: list[dict[str, Any]] = []
    used: set[str] = set()
    spinners: set[int] = set()
    for k in range(11):
        while True:
            first, last = rng.choice(_FIRST), rng.choice(_LAST)
            if f"{first} {last}" not in used:
                used.add(f"{first} {last}")
                break
        pid = team.id * 100 + k + 1
        if k == 4:
            position = (3, "Wicketkeeper")
        elif k < 4:
            position = (1, "Batsman")
        elif k < 7:
            position = (4, "Allrounder")
        else:
            position = (2, "Bowler")
        bowling_style = None
        if k >= 5 or k == 3:
            spin = k in (6, 9) or (k == 3)
            bowling_style = rng.choice(_SPIN if spin else _PACE)
            if spin:
                spinners.add(pid)
        players.append(
            {
                "id": pid,
                "country_id": 99000 + team.id,
                "firstname": first,
                "lastname": last,
                "fullname": f"{first} {last}",
                "image_path": "https://cdn.sportmonks.com/images/cricket/placeholder.png",
                "dateofbirth": f"{rng.randint(1988, 2004)}-{rng.randint(1, 12):02d}-{rng.randint(1, 28):02d}",
                "gender": "m",
                "battingstyle": rng.choice(_BATTING_STYLES),
                "bowlingstyle": bowling_style,
                "position": {"id": position[0], "name": position[1]},
                "updated_at": "2025-12-01T00:00:00.000000Z",
            }
        )
    ids = [p["id"] for p in players]
    bowlers = [ids[10], ids[9], ids[8], ids[7], ids[6], ids[5], ids[3]]
    return _Side(
        team, players, keeper=ids[4], captain=ids[rng.randint(0, 3)], bowlers=bowlers, spinners=spinners
    )


def _team_from(value: Team | dict[str, Any] | None, rng: random.Random, exclude: set[int]) -> Team:
    if isinstance(value, Team):
        return value
    if isinstance(value, dict):
        return Team.model_validate(value)
    choices = [t for t in TEAM_POOL if t[0] not in exclude]
    tid, name, code = rng.choice(choices)
    return Team(
        id=tid,
        name=name,
        code=code,
        image_path=f"https://cdn.sportmonks.com/images/cricket/teams/{tid % 32}/{tid}.png",
        country_id=99000,
        national_team=False,
        updated_at="2025-12-01T00:00:00.000000Z",
    )


@dataclass
class _Feed:
    """The entries as the feed posts them, with ball ids and pending corrections."""

    rng: random.Random
    next_id: int
    entries: list[dict[str, Any]] = field(default_factory=list)
    pending: list[tuple[int, dict[str, Any]]] = field(
        default_factory=list
    )  # (post after n more balls, entry)

    def new_id(self) -> int:
        self.next_id += self.rng.randint(1, 12)
        return self.next_id

    def post(self, ball: dict[str, Any], *, wicket_related: bool) -> None:
        """Post one true delivery, maybe first wrong (then corrected) or preceded by a phantom ball."""
        if self.rng.random() < 0.01:
            phantom = dict(
                ball, id=self.new_id(), score_id=69, batsmanout_id=None, catchstump_id=None, runout_by_id=None
            )
            self.entries.append({"op": "ball", "ball": phantom})
            self.entries.append({"op": "delete", "ball_id": phantom["id"]})
        ball = dict(ball, id=self.new_id())
        wrong: dict[str, Any] | None = None
        r = self.rng.random()
        if wicket_related and ball["score_id"] == _WICKET["caught"] and r < 0.12:
            # the catch is given a moment after the delivery was posted as a dot
            wrong = dict(ball, score_id=82, batsmanout_id=None, catchstump_id=None)
        elif ball["score_id"] == 82 and r < 0.006:
            # a catch given on the field, overturned on review
            wrong = dict(ball, score_id=54, batsmanout_id=ball["batsman_id"], catchstump_id=ball["_fielder"])
            wicket_related = True
        elif ball["score_id"] in _CONFUSIONS and r < 0.07:
            wrong = dict(ball, score_id=_CONFUSIONS[ball["score_id"]])
        self._flush(count_ball=True)
        if wrong is None:
            self.entries.append({"op": "ball", "ball": ball})
            return
        self.entries.append({"op": "ball", "ball": wrong})
        delay = 0 if wicket_related else self.rng.choice((0, 0, 1, 1, 2))
        correction = {"op": "correct", "ball": ball}
        if delay == 0:
            self.entries.append(correction)
        else:
            self.pending.append((delay, correction))

    def _flush(self, *, count_ball: bool) -> None:
        keep = []
        for left, entry in self.pending:
            if left <= 0:
                self.entries.append(entry)
            else:
                keep.append((left - int(count_ball), entry))
        self.pending = keep

    def flush_all(self) -> None:
        for _, entry in self.pending:
            self.entries.append(entry)
        self.pending = []


@dataclass
class _Innings:
    score: int = 0
    wickets: int = 0
    legal: int = 0


_BASE = {
    # per delivery weights: dot, 1, 2, 3, 4, 6, wicket, wide, noball, bye, legbye
    "T20": (34.0, 35.0, 7.5, 0.7, 11.0, 4.5, 5.6, 3.0, 0.6, 0.6, 2.0),
    "T10": (26.0, 32.0, 7.5, 0.7, 15.5, 10.0, 6.5, 3.0, 0.7, 0.6, 2.0),
    "ODI": (50.0, 30.0, 7.0, 1.0, 7.5, 1.2, 2.5, 2.5, 0.5, 0.4, 1.5),
}
_OUTCOMES = ("0", "1", "2", "3", "4", "6", "W", "wd", "nb", "b", "lb")


def _weights(
    fmt: str,
    over: int,
    overs: int,
    batter_pos: int,
    dots_in_over: int,
    target: int | None,
    inn: _Innings,
    hat: bool,
) -> list[float]:
    w = list(_BASE[fmt])
    phase = over / overs
    if phase < 0.3:  # powerplay: boundaries over the top of the ring, wickets to the new ball
        w[4] *= 1.2
        w[0] *= 1.1
    elif phase >= 0.8:  # death overs: swing hard
        w[4] *= 1.15
        w[5] *= 1.6
        w[6] *= 1.5
        w[0] *= 0.8
    if batter_pos >= 8:  # the tail
        w[6] *= 1.8
        w[4] *= 0.5
        w[5] *= 0.5
    if dots_in_over >= 3:  # pressure builds: dot balls breed dot balls (and maidens)
        w[0] *= 1.9
    if target is not None:
        balls_left = max(1, overs * 6 - inn.legal)
        required = (target - inn.score) * 6 / balls_left
        par = {"T20": 8.0, "T10": 10.0, "ODI": 5.5}[fmt]
        if required > par * 1.25:
            w[4] *= 1.3
            w[5] *= 1.6
            w[6] *= 1.15
            w[0] *= 0.85
        elif required < par * 0.6:
            w[5] *= 0.6
            w[6] *= 0.6
    if hat:
        w[6] *= 4.0
    return w


def synthesise(
    format: str = "T20",
    seed: int = 0,
    *,
    fixture_id: str | None = None,
    league_id: int = SYNTH_LEAGUE_ID,
    localteam: Team | dict[str, Any] | None = None,
    visitorteam: Team | dict[str, Any] | None = None,
    starting_at: datetime | None = None,
    ms_per_ball: float | None = None,
    overs: int | None = None,
) -> Tape:
    """A whole synthesised match (``T20``, ``ODI`` or ``T10``), the same for the same arguments.

    ``overs`` shortens each innings (1 to the format's overs; default the format's), as a rain-reduced match
    is: a whole match, start to result, in fewer balls (what a test that needs a whole match quickly plays).
    The gap before each delivery is drawn from real matches (``daemon.replay.pace``); ``ms_per_ball`` scales
    them to that mean (default: real pace, about 52 s). A correction or a deletion comes 2-10 s after the
    entry before it. The gaps are drawn from a generator of their own, so the match is the same whatever the
    pace.
    """
    fmt = format.upper()
    if fmt not in _FORMAT_OVERS:
        raise ValueError(f"format: {format!r} is not one of {', '.join(_FORMAT_OVERS)}")
    if seed < 0:
        raise ValueError(f"seed: must be >= 0, got {seed}")
    if overs is not None and not (isinstance(overs, int) and 1 <= overs <= _FORMAT_OVERS[fmt]):
        raise ValueError(
            f"overs: must be a whole number from 1 to {_FORMAT_OVERS[fmt]} for {fmt}, got {overs!r}"
        )
    rng = random.Random(f"{fmt}-{seed}")
    overs = overs or _FORMAT_OVERS[fmt]
    home = _team_from(localteam, rng, set())
    away = _team_from(visitorteam, rng, {home.id})
    if home.id == away.id:
        raise ValueError("localteam and visitorteam must differ")
    sides = {home.id: _squad(home), away.id: _squad(away)}
    toss_winner = rng.choice((home.id, away.id))
    elected = "bowling" if rng.random() < 0.6 else "batting"
    first_bat = toss_winner if elected == "batting" else (away.id if toss_winner == home.id else home.id)
    second_bat = away.id if first_bat == home.id else home.id
    feed = _Feed(rng, next_id=20_000_000 + (seed % 100_000) * 1000)

    first = _play_innings(rng, feed, fmt, overs, "S1", sides[first_bat], sides[second_bat], target=None)
    feed.flush_all()
    _play_innings(rng, feed, fmt, overs, "S2", sides[second_bat], sides[first_bat], target=first.score + 1)
    feed.flush_all()

    fid = fixture_id or str(SYNTH_FIXTURE_BASE + _FORMAT_OFFSET[fmt] + seed % 1_000_000)
    venue_id, venue_name, city = rng.choice(VENUE_POOL)
    start = starting_at or (SYNTH_EPOCH + timedelta(days=seed % 365))
    players = [p for side in sides.values() for p in side.players]
    lineups = [
        {
            "player_id": p["id"],
            "team_id": side.team.id,
            "captain": p["id"] == side.captain,
            "wicketkeeper": p["id"] == side.keeper,
            "substitution": False,
        }
        for side in (sides[home.id], sides[away.id])
        for p in side.players
    ]
    for entry in feed.entries:
        if "ball" in entry:
            entry["ball"] = {k: v for k, v in entry["ball"].items() if not k.startswith("_")}
    pace_rng = random.Random(f"{fmt}-{seed}-pace")
    scale = 1.0 if ms_per_ball is None else ms_per_ball / 1000.0 / mean_gap_s()
    for entry in feed.entries:
        gap_s = draw_gap_s(pace_rng) if entry["op"] == "ball" else pace_rng.uniform(2.0, 10.0)
        entry["gap_ms"] = round(gap_s * scale * 1000.0, 1)
    mean_ms = sum(e["gap_ms"] for e in feed.entries) / max(1, len(feed.entries))
    raw = {
        "source": f"synth {fmt} seed {seed}",
        "fixture_id": fid,
        "league_id": league_id,
        "season_id": SYNTH_SEASON_ID,
        "stage_id": SYNTH_STAGE_ID,
        "round": f"{_ordinal(seed % 60 + 1)} Match",
        "type": fmt,
        "overs_per_innings": overs,
        "starting_at": start,
        "localteam": home,
        "visitorteam": away,
        "venue": {
            "id": venue_id,
            "name": venue_name,
            "city": city,
            "country_id": 99000,
            "image_path": "https://cdn.sportmonks.com",
            "capacity": 30000,
            "floodlight": True,
        },
        "league": {
            "id": league_id,
            "name": "Sightscreen Replay League",
            "code": "SRL",
            "season_id": SYNTH_SEASON_ID,
            "country_id": 99000,
            "image_path": f"https://cdn.sportmonks.com/images/cricket/leagues/{league_id % 32}/{league_id}.png",
            "type": "league",
        },
        "season": {"id": SYNTH_SEASON_ID, "name": "2026", "league_id": league_id, "code": "2026"},
        "stage": {
            "id": SYNTH_STAGE_ID,
            "name": "Regular Season",
            "league_id": league_id,
            "season_id": SYNTH_SEASON_ID,
            "code": "RS",
            "standings": True,
        },
        "toss": {"won_team_id": toss_winner, "elected": elected},
        "lineups": lineups,
        "players": players,
        "ms_per_ball": round(mean_ms, 3) or 1.0,
        "entries": feed.entries,
    }
    return Tape.model_validate(raw)


def _ordinal(n: int) -> str:
    suffix = "th" if 10 <= n % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")
    return f"{n}{suffix}"


def _play_innings(
    rng: random.Random,
    feed: _Feed,
    fmt: str,
    overs: int,
    board: str,
    bat: _Side,
    bowl: _Side,
    *,
    target: int | None,
) -> _Innings:
    inn = _Innings()
    order = bat.ids
    crease = [order[0], order[1]]  # slot one, slot two: a new batter takes the dismissed batter's slot
    striker = 0  # index into crease
    next_in = 2
    # a fifth of the overs each, rounded up (as the laws have it for shortened matches)
    quota = -(-overs // 5)
    bowled: Counter[int] = Counter()
    prev_bowler: int | None = None
    run_of_wickets: Counter[int] = Counter()  # consecutive wicket deliveries per bowler (hat-trick watch)
    fielders = [p for p in bowl.ids]

    def over_done() -> bool:
        return inn.wickets >= 10 or (target is not None and inn.score >= target)

    for over in range(overs):
        candidates = [b for b in bowl.bowlers if bowled[b] < quota and b != prev_bowler]
        if not candidates:  # cannot happen with 7 bowlers, but never bowl an over nobody may bowl
            candidates = [b for b in bowl.bowlers if bowled[b] < quota] or list(bowl.bowlers)
        weights = [(quota - bowled[b]) ** 2 + (3 if i < 4 else 0.3) for i, b in enumerate(candidates)]
        bowler = rng.choices(candidates, weights)[0]
        bowled[bowler] += 1
        prev_bowler = bowler
        legal_in_over = 0
        dots = 0
        while legal_in_over < 6 and not over_done():
            batter = crease[striker]
            pos = order.index(batter) + 1
            outcome = rng.choices(
                _OUTCOMES,
                _weights(fmt, over, overs, pos, dots, target, inn, run_of_wickets[bowler] >= 2),
            )[0]
            ball_no = round(over + (legal_in_over + 1) / 10, 1)
            base: dict[str, Any] = {
                "scoreboard": board,
                "team_id": bat.team.id,
                "ball": ball_no,
                "batsman_one_on_creeze_id": crease[0],
                "batsman_two_on_creeze_id": crease[1],
                "batsman_id": batter,
                "bowler_id": bowler,
                "batsmanout_id": None,
                "catchstump_id": None,
                "runout_by_id": None,
                "_fielder": rng.choice([f for f in fielders if f != bowler]),
            }
            out_slot: int | None = None
            swap = False
            wicket_related = False
            if outcome in ("0", "1", "2", "3", "4", "6"):
                runs = int(outcome)
                base["score_id"] = _RUNS[runs]
                swap = runs % 2 == 1
            elif outcome == "wd":
                runs = rng.choices((1, 2, 5), (85, 5, 10))[0]
                if runs == 1 and rng.random() < 0.04 and bowler in bowl.spinners:
                    base.update(score_id=_WIDE_STUMPED, batsmanout_id=batter, catchstump_id=bowl.keeper)
                    out_slot, wicket_related = striker, True
                else:
                    base["score_id"] = _WIDES[runs]
                    swap = runs == 2
            elif outcome == "nb":
                runs = rng.choices((0, 1, 2, 4, 6), (40, 25, 8, 15, 12))[0]
                base["score_id"] = 114 if runs == 1 and rng.random() < 0.2 else _NOBALLS[runs]
                swap = runs % 2 == 1
            elif outcome in ("b", "lb"):
                runs = rng.choices((1, 2, 4), (70, 10, 20))[0]
                base["score_id"] = (_BYES if outcome == "b" else _LEG_BYES)[runs]
                swap = runs % 2 == 1
            else:  # a wicket
                wicket_related = True
                kind = rng.choices(
                    ("caught", "bowled", "lbw", "stumped", "run out", "hit wicket"), (58, 17, 13, 4.5, 6, 1.5)
                )[0]
                if kind == "stumped" and bowler not in bowl.spinners:
                    kind = "caught"
                out_slot = striker
                if kind == "caught":
                    r = rng.random()
                    catcher = bowl.keeper if r < 0.2 else bowler if r < 0.28 else base["_fielder"]
                    base.update(score_id=_WICKET["caught"], catchstump_id=catcher)
                elif kind == "stumped":
                    base.update(score_id=_WICKET["stumped"], catchstump_id=bowl.keeper)
                elif kind == "run out":
                    completed = rng.choice((0, 0, 1))
                    out_slot = rng.choice((striker, 1 - striker))
                    base.update(
                        score_id=_RUN_OUT_1 if completed else _WICKET["run out"],
                        runout_by_id=base["_fielder"],
                    )
                    swap = completed == 1
                else:
                    base["score_id"] = _WICKET[kind]
                base["batsmanout_id"] = crease[out_slot]
            score: Score = SCORES[base["score_id"]]
            feed.post(base, wicket_related=wicket_related)
            inn.score += score.team_runs
            legal = score.is_legal
            if legal:
                legal_in_over += 1
                inn.legal += 1
            dots = dots + 1 if (legal and score.team_runs == 0 and not score.is_wicket) else dots
            if not score.is_wide:
                run_of_wickets[bowler] = (
                    run_of_wickets[bowler] + 1 if score.is_wicket and not score.is_run_out else 0
                )
            if swap:
                striker = 1 - striker
            if out_slot is not None:
                inn.wickets += 1
                if inn.wickets >= 10:
                    break
                crease[out_slot] = order[next_in]
                next_in += 1
                if not score.is_run_out:
                    striker = out_slot  # the new batter faces (2022 playing conditions)
        if over_done():
            break
        striker = 1 - striker  # ends change at the end of the over
    return inn
