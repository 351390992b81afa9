import { forkTests } from './forks'

forkTests('gvisor')
