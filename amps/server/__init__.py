"""The asyncio + gRPC adapter: sessions, publish path, subscriptions, admin HTTP. [io]"""
