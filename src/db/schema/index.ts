export * from './identity'
export * from './sessions'
