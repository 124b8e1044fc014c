"""The Email tests' SMTP server: aiosmtpd on a loopback port, with AUTH
(PLAIN/LOGIN over the plain loopback connection, checked against the users
given), delivering every accepted mail into the private Dovecot through its
LMTP port, so the mail lands in the recipient's real mailbox.

Usage: smtp_relay.py SMTP_PORT LMTP_PORT PASSWD_FILE
(PASSWD_FILE: Dovecot's passwd-file, `address:{PLAIN}password:...` lines,
read at each login so users added later count.)
Prints "ready" once listening; runs until killed.
"""

import asyncio
import smtplib
import sys

from aiosmtpd.controller import Controller
from aiosmtpd.smtp import AuthResult, LoginPassword


class Relay:
    def __init__(self, lmtp_port):
        self.lmtp_port = lmtp_port

    async def handle_DATA(self, server, session, envelope):
        def deliver():
            lmtp = smtplib.LMTP("127.0.0.1", self.lmtp_port)
            try:
                lmtp.sendmail(envelope.mail_from, envelope.rcpt_tos, envelope.original_content)
            finally:
                lmtp.quit()

        try:
            await asyncio.get_running_loop().run_in_executor(None, deliver)
        except smtplib.SMTPRecipientsRefused as e:
            return "550 no such user here: %s" % ", ".join(e.recipients)
        except Exception as e:  # the test reads this in its failure message
            return "451 delivery failed: %s" % e
        return "250 OK delivered"


class Users:
    def __init__(self, path):
        self.path = path

    def password(self, user):
        with open(self.path) as f:
            for line in f:
                fields = line.rstrip("\n").split(":")
                if len(fields) > 1 and fields[0] == user:
                    return fields[1].removeprefix("{PLAIN}")
        return None

    def __call__(self, server, session, envelope, mechanism, auth_data):
        if not isinstance(auth_data, LoginPassword):
            return AuthResult(success=False, handled=False)
        expected = self.password(auth_data.login.decode())
        ok = expected is not None and expected == auth_data.password.decode()
        return AuthResult(success=ok, handled=False)


def main():
    smtp_port, lmtp_port = int(sys.argv[1]), int(sys.argv[2])
    controller = Controller(
        Relay(lmtp_port),
        hostname="127.0.0.1",
        port=smtp_port,
        authenticator=Users(sys.argv[3]),
        auth_require_tls=False,
        # Senders that do not authenticate (the tests' own mail) are let in
        # too: this stands for the Internet's mail arriving at a relay.
        auth_required=False,
    )
    controller.start()
    print("ready", flush=True)
    try:
        asyncio.run(asyncio.Event().wait())
    finally:
        controller.stop()


if __name__ == "__main__":
    main()
