"""The Python client: `Client` (asyncio) and `BlockingClient` (threads), one gRPC stream each."""

from amps.client.aio import Client
from amps.client.blocking import BlockingClient, BlockingSubscription
from amps.client.bookmarks import BookmarkStore, FileBookmarkStore
from amps.client.message import ClientStatistics, Message, PublishFailure, Subscription

__all__ = [
    "BlockingClient",
    "BlockingSubscription",
    "BookmarkStore",
    "Client",
    "ClientStatistics",
    "FileBookmarkStore",
    "Message",
    "PublishFailure",
    "Subscription",
]
