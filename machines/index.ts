export * from './session.machine'
