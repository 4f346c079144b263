"""A small realistic chat history for history-search tests: one user, three sessions, plus
another user whose messages share the rare words and must never be found for the first."""

from __future__ import annotations

import datetime as dt
from typing import Any

USER = "ana"
OTHER_USER = "bo"

SESSIONS: dict[str, tuple[dt.datetime, list[tuple[str, str]]]] = {
    "trip-2023-05": (
        dt.datetime(2023, 5, 8, 18, 0, tzinfo=dt.UTC),
        [
            (
                "I'm finally booking the honeymoon: ten days in Zanzibar at the end of August.",
                "Congratulations! Late August is the dry season there, great timing.",
            ),
            (
                "Should we stay in Stone Town or on the east coast beaches?",
                "Split it: three nights in Stone Town for the history, the rest near Paje.",
            ),
            (
                "My husband Tomás wants to try kitesurfing, I just want to read under a palm tree.",
                "Paje is one of the best kitesurfing spots, so you both win.",
            ),
            (
                "What vaccinations do we need for Tanzania?",
                "Check the yellow fever rules if you transit through Kenya, and ask your doctor "
                "about hepatitis A and typhoid.",
            ),
            ("I found flights via Doha for 640 euros each.", "That's a good fare for August."),
            (
                "Remind me to renew my passport, it expires in November.",
                "Many countries want six months of validity, so renew it before the trip.",
            ),
            (
                "We want one fancy dinner, maybe at the Rock restaurant.",
                "The Rock gets booked out weeks ahead; reserve early.",
            ),
            ("Is it safe to drink the tap water there?", "Stick to bottled or filtered water."),
            (
                "I'm nervous about the boat trip to Prison Island because I get seasick.",
                "Take motion sickness tablets an hour before you board.",
            ),
            ("ok thanks", "Have a wonderful trip!"),
        ],
    ),
    "work-2023-06": (
        dt.datetime(2023, 6, 12, 9, 0, tzinfo=dt.UTC),
        [
            (
                "The VPN keeps dropping every twenty minutes since the update.",
                "Is it the new client, version 5.2?",
            ),
            (
                "Yes, I opened ticket INC-40213 with the helpdesk about the VPN.",
                "Good, keep the ticket number handy.",
            ),
            (
                "Another ticket, INC-39977, was for my broken laptop charger last month.",
                "Was that one resolved?",
            ),
            (
                "My manager Priya wants the quarterly report by Friday.",
                "Do you want an outline for it?",
            ),
            (
                "The report covers churn, which went up to 4.1 percent this quarter.",
                "That's worth a chart of its own.",
            ),
            ("I'm presenting it to the board on the 20th.", "Practice the first two minutes most."),
            ("I prefer writing in Markdown and exporting to PDF.", "Pandoc does that well."),
            (
                "Our team is moving from Jira to Linear in July.",
                "Migrations go smoother with a freeze week.",
            ),
            (
                "Can you draft an email asking for a second monitor?",
                "Sure: Hi Priya, a second monitor would speed up my reporting work.",
            ),
            ("I also need to book a meeting room for the retro.", "Which day works for the team?"),
        ],
    ),
    "home-2023-07": (
        dt.datetime(2023, 7, 3, 20, 0, tzinfo=dt.UTC),
        [
            ("My dog Rex chewed the sofa while we were out.", "Oh no! Was he alone for long?"),
            (
                "About six hours, he's a two year old beagle with too much energy.",
                "Beagles need a lot of exercise; longer morning walks help.",
            ),
            (
                "We're thinking about a crate for when we leave the house.",
                "Crate training works if you make it a cozy den.",
            ),
            (
                "The sofa was a green velvet one from my grandmother.",
                "That's a shame, a reupholsterer might save it.",
            ),
            (
                "I started growing tomatoes and basil on the balcony.",
                "Keep the basil out of the afternoon sun.",
            ),
            (
                "My sister Maria is visiting next weekend with her kids.",
                "Plan something for the kids to do.",
            ),
            (
                "Recipe idea: a lasagna without mushrooms, Maria hates them.",
                "Use spinach and ricotta instead.",
            ),
            (
                "Our washing machine is leaking from the bottom.",
                "Check the pump filter and the door seal first.",
            ),
            (
                "The landlord told me the plumber can come on Tuesday.",
                "Put towels down until then.",
            ),
            ("hi", "Hi! How can I help?"),
        ],
    ),
}

# The other user: the same rare words, the same ticket number, a dog that chews.
OTHER_SESSIONS: dict[str, tuple[dt.datetime, list[tuple[str, str]]]] = {
    "bo-chat": (
        dt.datetime(2023, 6, 1, 12, 0, tzinfo=dt.UTC),
        [
            ("Zanzibar was amazing, we went there last year.", "Glad you enjoyed Zanzibar!"),
            ("My ticket INC-40213 is about the office printer.", "Printers, always printers."),
            ("My dog chewed my new shoes and the sofa cushions.", "Dogs do that when bored."),
        ],
    ),
}


def transcript(
    user: str, sessions: dict[str, tuple[dt.datetime, list[tuple[str, str]]]]
) -> list[dict[str, Any]]:
    """Transcript lines (POST /v1/import), each message with an external id and a time."""
    lines: list[dict[str, Any]] = []
    for session_id, (start, turns) in sessions.items():
        for i, (said, reply) in enumerate(turns):
            when = start + dt.timedelta(minutes=3 * i)
            lines.append(
                {
                    "user_id": user,
                    "session_id": session_id,
                    "role": "user",
                    "speaker": user.capitalize(),
                    "content": said,
                    "created_at": when.isoformat(),
                    "external_id": f"{session_id}-{i}u",
                }
            )
            lines.append(
                {
                    "user_id": user,
                    "session_id": session_id,
                    "role": "assistant",
                    "content": reply,
                    "created_at": (when + dt.timedelta(seconds=20)).isoformat(),
                    "external_id": f"{session_id}-{i}a",
                }
            )
    return lines
