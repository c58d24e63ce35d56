// An app needs only `import BrokerClient`: the protocol's types it works with (Account, AccountSelector, TokenResult,
// WebviewType, Secret, the error codes) come with it, as NIO's umbrella module re-exports NIOCore.
@_exported public import BrokerProtocol
