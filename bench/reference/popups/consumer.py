"""Drains the Redis list of shows, clicks and closes into MySQL, in batches of up to 1,000
(one transaction: the event log, each user's newest state, the day's shows per popup), as the
popup report's write queue did. Prints the statements it ran when it stops (SIGTERM), after
draining what is queued."""

import json
import os
import signal
import sys

import pymysql
import redis

R = redis.Redis(unix_socket_path=os.environ["REDIS_SOCKET"])
DB = dict(host="127.0.0.1", port=3306, user="root", password="", database=os.environ["DB"])
QUEUE = "popup_events"
SHOWN = 1
stopping = False


def stop(*_):
    global stopping
    stopping = True


def main():
    signal.signal(signal.SIGTERM, stop)
    conn = pymysql.connect(autocommit=False, **DB)
    statements = 0
    while True:
        pipe = R.pipeline(transaction=True)
        pipe.lrange(QUEUE, 0, 999)
        pipe.ltrim(QUEUE, 1000, -1)
        items, _ = pipe.execute()
        if not items:
            if stopping:
                break
            R.blpop(["popup_wakeup"], timeout=0.1)
            continue
        events, users, daily = [], {}, {}
        for raw in items:
            action, at, user, popup, nxt, shows = json.loads(raw)
            events.append((at, user, popup, action))
            users[(user, popup)] = (user, popup, nxt, shows, action, at)
            if action == SHOWN:
                daily[(popup, at // 86400)] = daily.get((popup, at // 86400), 0) + 1
        with conn.cursor() as c:
            c.executemany("INSERT INTO hp_popup_events (at, user_id, popup_id, action) "
                          "VALUES (%s, %s, %s, %s)", events)
            c.executemany("INSERT INTO hp_popup_users (user_id, popup_id, next_eligible, shows, "
                          "last_action, updated_at) VALUES (%s, %s, %s, %s, %s, %s) "
                          "ON DUPLICATE KEY UPDATE next_eligible = VALUES(next_eligible), "
                          "shows = VALUES(shows), last_action = VALUES(last_action), "
                          "updated_at = VALUES(updated_at)", list(users.values()))
            c.executemany("INSERT INTO hp_popup_daily (popup_id, day, shows) VALUES (%s, %s, %s) "
                          "ON DUPLICATE KEY UPDATE shows = shows + VALUES(shows)",
                          [(p, d, n) for (p, d), n in daily.items()])
        conn.commit()
        statements += 4
    print(f"consumer: {statements} statements", file=sys.stderr)


if __name__ == "__main__":
    main()
